import os, pickle, torch
out = os.environ["OUT"]
dev = torch.device("cuda")
keep = [torch.randn(1024, 1024, device=dev) for _ in range(4)]  # before recording
torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
m = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(5):
    x = torch.randn(512, 2048, device=dev)
    loss = m(x).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad()
    if i == 2:
        del keep[0]
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot()
with open(os.path.join(out, "expandable.pickle"), "wb") as f:
    pickle.dump(snap, f)
print("recorded", sum(len(t) for t in snap["device_traces"]), "events;", len(snap["segments"]), "segments; expandable",
      snap["allocator_settings"].get("expandable_segments"))
