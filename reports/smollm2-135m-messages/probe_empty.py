# The probe of "Where the student and the teacher disagree": the probability of `]}` (an empty
# reply) after `{"memories":[` for held-out rows, with transformers on an exported checkpoint.
# python probe_empty.py <export folder> <valid.jsonl>  (one JSON line per row: window_id, the
# teacher's record count n, the top 5 next tokens with log-probabilities)
import json,sys,torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d=sys.argv[1]; rows=[json.loads(l) for l in open(sys.argv[2])]
tok=AutoTokenizer.from_pretrained(d); m=AutoModelForCausalLM.from_pretrained(d,torch_dtype=torch.float32); m.eval()
torch.set_num_threads(1)
prefix='{"memories":['
out=[]
for r in rows:
    ids=tok.apply_chat_template(r['messages'][:2],add_generation_prompt=True,tokenize=False)+prefix
    x=tok(ids,return_tensors='pt',add_special_tokens=False)
    with torch.no_grad(): lp=torch.log_softmax(m(**x).logits[0,-1],-1)
    t=json.loads(r['messages'][2]['content'])['memories']
    # candidate first tokens
    top=torch.topk(lp,5)
    out.append({'window_id':r['window_id'],'n':len(t),'top':[(tok.decode([i]),round(float(v),3)) for v,i in zip(top.values,top.indices)]})
    print(json.dumps(out[-1]),flush=True)
