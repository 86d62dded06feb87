"""What the same-message near-duplicate rule does to stored records (the gold-set choice of
memkit_infer::extract::SAME_MESSAGE_DUPLICATE_F1).

Drops a record whose content reaches token F1 >= THRESHOLD with an earlier kept record of the
same source turn, LoCoMo's token F1 re-implemented here (normalise, NLTK Porter stems), and
writes the rest. Score the output with `memkit compare --gold`:

    python same_message_duplicates.py 0.6 data/extracted/gold/teacher-decomposed.jsonl /tmp/t06.jsonl
    memkit compare --gold data/gold/locomo-conv-30.jsonl --gold data/gold/lme-s.jsonl --records t06=/tmp/t06.jsonl

Pass `window` as a fourth argument to compare records of the whole window instead.
Needs nltk (pip install nltk).
"""
import collections
import json
import re
import sys

from nltk.stem import PorterStemmer

STEM = PorterStemmer()


def tokens(s):
    s = s.replace(",", "").lower()
    s = "".join(c for c in s if not (c.isascii() and not c.isalnum() and not c.isspace()))
    s = re.sub(r"\b(a|an|the|and)\b", " ", s)
    return [STEM.stem(w) for w in s.split()]


def f1(a, b):
    a, b = tokens(a), tokens(b)
    left, same = collections.Counter(b), 0
    for t in a:
        if left[t] > 0:
            left[t] -= 1
            same += 1
    if same == 0:
        return 0.0
    p, r = same / len(a), same / len(b)
    return 2 * p * r / (p + r)


def main():
    threshold, src, dst = float(sys.argv[1]), sys.argv[2], sys.argv[3]
    per_window = len(sys.argv) > 4 and sys.argv[4] == "window"
    key = (lambda r: r["pointer"]["window_id"]) if per_window else (
        lambda r: (r["pointer"]["window_id"], tuple(r["pointer"]["turn_ids"])))
    rows = [json.loads(line) for line in open(src)]
    kept = []
    for r in rows:
        if not any(key(k) == key(r) and f1(r["content"], k["content"]) >= threshold for k in kept):
            kept.append(r)
    with open(dst, "w") as out:
        for r in kept:
            out.write(json.dumps(r) + "\n")
    print(f"{src}: {len(rows)} records, {len(kept)} kept at {threshold}", file=sys.stderr)


if __name__ == "__main__":
    main()
