import time, torch, statistics
from specdec.engines.hf import load_model
torch.set_grad_enabled(False)
import sys; torch.set_num_threads(int(sys.argv[1])); print("threads", torch.get_num_threads())
t = load_model('/work/main/models/smollm2-135m-instruct', device='cpu', dtype='float32')
m = t.model
def tm(f, reps=20):
    for _ in range(3): f()
    ts=[]
    for _ in range(reps):
        s=time.perf_counter(); f(); ts.append((time.perf_counter()-s)*1000)
    return round(statistics.median(ts),2)
layer = m.model.layers[0]
for n in (1, 2, 4):
    h = torch.randn(1, n, 576)
    print(n, "head", tm(lambda: m.lm_head(h[0])), "mlp", tm(lambda: layer.mlp(h)), "q_proj", tm(lambda: layer.self_attn.q_proj(h)),
          "sdpa", tm(lambda: torch.nn.functional.scaled_dot_product_attention(torch.randn(1,9,n,64), torch.randn(1,3,80+n,64), torch.randn(1,3,80+n,64),
             attn_mask=(torch.ones(n, 80+n, dtype=torch.bool) if n > 1 else None), enable_gqa=True)), flush=True)
