"""How often a gold message holds a gold memory, by what the teacher did with it: kept a record,
wrote records that were all dropped, or wrote none. Reads the teacher's gold records and ledgers
(data/extracted/gold/teacher-decomposed-{lme,conv30}.jsonl and .windows.jsonl, as `just gold`
wrote them) and the gold set; run from the repository root:

    python reports/smollm2-135m-messages/failed_messages_gold.py [../shared/data]

A dropped record names its message by the window-relative `source_id`; the message's turn is found
from the window's kept records (LoCoMo windows) or the window layout (LongMemEval: 5 user
messages, 1 of context, user turns at odd positions).
"""
import collections
import json
import sys

DATA = sys.argv[1] if len(sys.argv) > 1 else "../shared/data"
OUT = "data/extracted/gold/"

gold = collections.Counter()
for path in ["data/gold/locomo-conv-30.jsonl", "data/gold/lme-s.jsonl"]:
    for line in open(path):
        gold[json.loads(line)["turn_id"]] += 1

sessions = open("data/gold/lme-s.sessions").read().split()
turns, seen = [], set()
for q in json.load(open(f"{DATA}/longmemeval/longmemeval_s_cleaned_subset200.json")):
    for sid, session in zip(q["haystack_session_ids"], q["haystack_sessions"]):
        if sid in sessions and sid not in seen:
            seen.add(sid)
            turns += [f"{sid}:{i + 1}" for i, m in enumerate(session) if m["role"] == "user"]
conv = next(c for c in json.load(open(f"{DATA}/locomo/locomo10.json")) if c["sample_id"] == "conv-30")["conversation"]
order = [t["dia_id"] for i in range(1, 4) for t in conv[f"session_{i}"]]
turns += order

kept_turns, dropped_turns = set(), set()
for name in ["teacher-decomposed-lme", "teacher-decomposed-conv30"]:
    records = [json.loads(line) for line in open(OUT + name + ".jsonl")]
    by_window = collections.defaultdict(list)
    for r in records:
        by_window[r["pointer"]["window_id"]].append(r)
        kept_turns.add(r["pointer"]["turn_ids"][0])
    for line in open(OUT + name + ".jsonl.windows.jsonl"):
        e = json.loads(line)["extraction"]
        wid, k = e["window_id"], int(e["window_id"].split("/w")[-1])
        if "lme" in name:
            session = wid.split("/")[1]
            turn = lambda s: f"{session}:{2 * (4 * k + s) - 1}"
        else:
            offset = next((order.index(r["pointer"]["turn_ids"][0]) - (x["source_id"] - 1)
                           for x, r in zip(e["records"], by_window[wid])), 20 * k)
            turn = lambda s, offset=offset: order[offset + s - 1] if offset + s - 1 < len(order) else None
        for err in e["errors"]:
            try:
                t = turn(json.loads(err["raw"])["source_id"])
            except (ValueError, KeyError, TypeError):
                continue
            if t is not None:
                dropped_turns.add(t)

rows = collections.OrderedDict((("kept a record", []), ("wrote records, all dropped", []), ("wrote none", [])))
for t in turns:
    cls = "kept a record" if t in kept_turns else "wrote records, all dropped" if t in dropped_turns else "wrote none"
    rows[cls].append(t)
print("| teacher on a gold message | messages | with a gold memory | gold memories |")
print("|---|---:|---:|---:|")
for cls, ts in rows.items():
    with_gold = sum(1 for t in ts if gold[t])
    print(f"| {cls} | {len(ts)} | {with_gold} ({with_gold / max(len(ts), 1):.0%}) | {sum(gold[t] for t in ts)} |")
