"""The ablation's record set: the published extractor's records as grounding kept them, before
validation and the near-duplicate rule (memkit-clean's steps 2 and 3).

Reads the window ledger of data/extracted/locomo-full/ (each window's raw reply and grounding's
decisions) and writes one record per record grounding kept, pointed at the message grounding chose,
with the reply's type and keywords and no other dimension (validation is what normalises the time).
Window i of the extractor's 2/1 windows holds the conversation's messages i and i+1 (source ids 1
and 2), so source id s is message i + s - 1.

Run from the repository root:
    python3 reports/locomo-keys-ablations-dev/unvalidated_keys.py
"""
import datetime
import json
import sys

LEDGER = "data/extracted/locomo-full/published-student.jsonl.windows.jsonl"
LOCOMO = "../shared/data/locomo/locomo10.json"
OUT = "data/extracted/locomo-full/published-student-unvalidated.jsonl"


def messages(sample):
    """(turn id, speaker, timestamp) of each message, in order; 30 s apart from the session's date,
    as memkit's LoCoMo loader times them."""
    conversation, out, n = sample["conversation"], [], 1
    while f"session_{n}" in conversation:
        start = datetime.datetime.strptime(conversation[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y")
        for k, turn in enumerate(conversation[f"session_{n}"]):
            out.append((turn["dia_id"], turn["speaker"], (start + datetime.timedelta(seconds=30 * k)).isoformat()))
        n += 1
    return out


def main():
    samples = {s["sample_id"]: messages(s) for s in json.load(open(LOCOMO))}
    written = 0
    with open(OUT, "w") as out:
        for line_no, line in enumerate(open(LEDGER), 1):
            extraction = json.loads(line)["extraction"]
            window = extraction["window_id"]
            conversation, w = window.split("/")
            try:
                reply = json.loads(extraction["raw"])["memories"]
            except (ValueError, KeyError, TypeError):
                continue  # a reply that does not parse kept nothing
            dims = {m.get("content"): m.get("dimension") or {} for m in reply if isinstance(m, dict)}
            for k, g in enumerate(extraction.get("grounding", [])):
                if g["decision"] != "kept":
                    continue
                index = int(w[1:]) + g["source_id"] - 1
                if not 0 <= index < len(samples[conversation]):
                    sys.exit(f"{LEDGER}:{line_no}: window {window}: source id {g['source_id']} is outside the conversation")
                turn, speaker, timestamp = samples[conversation][index]
                d = dims.get(g["content"], {})
                kind = d.get("memory_type") if d.get("memory_type") in ("fact", "episodic", "profile") else "fact"
                keywords = [x for x in d.get("keywords") or [] if isinstance(x, str)]
                record = {
                    "id": f"{window}#g{k}",
                    "content": g["content"],
                    "type": kind,
                    "dims": {"time": "", "location": "", "reason": "", "purpose": "", "keywords": keywords},
                    "pointer": {"window_id": window, "turn_ids": [turn], "speaker": speaker, "timestamp": timestamp},
                }
                out.write(json.dumps(record) + "\n")
                written += 1
    print(f"{OUT}: {written} records")


if __name__ == "__main__":
    main()
