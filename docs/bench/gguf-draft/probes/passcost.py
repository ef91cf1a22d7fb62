import statistics, sys, time, torch
from specdec.batching import BatchingOptions
from specdec.batching.runner import default_runner
from specdec.kv_cache import CachedSequence
from specdec.engines.hf import load_model
torch.set_grad_enabled(False)
t = load_model('/work/main/models/smollm2-135m-instruct', device='cpu', dtype='float32')
print("threads", torch.get_num_threads(), "dtype", next(t.model.parameters()).dtype)
ctx = list(range(1000, 1080))
def cost(lm, n, reps=12):
    lm.advance(ctx); times=[]
    for r in range(reps+2):
        s=time.perf_counter(); lm.advance(ctx+[5+r+i for i in range(n)], n); e=time.perf_counter()-s
        if r>=2: times.append(e*1000)
        lm.advance(ctx)  # roll back
    return round(statistics.median(times),1)
for name, make in (("packed", lambda: default_runner(t.model, BatchingOptions(max_batch_size=8)).open_sequence(512)),):
    lm = make()
    print(name, {n: cost(lm, n) for n in (1, 2, 4)}, flush=True)
