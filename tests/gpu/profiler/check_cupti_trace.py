"""Checks a `gpumem dump --stacks` of the CUPTI tracer's trace against the EXPECT lines
printed by cuda_memory_calls. Usage: check_cupti_trace.py EXPECTED DUMP"""
import sys

expected = [l.split() for l in open(sys.argv[1]) if l.startswith("EXPECT")]
events = []  # (fields dict, [frames])
for line in open(sys.argv[2]):
    if line.startswith("#"):
        continue
    if line.startswith("    at "):
        events[-1][1].append(line.strip()[3:])
        continue
    parts = line.rstrip("\n").split("\t")
    fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    fields["action"] = parts[1]
    events.append((fields, []))

failures = []
for e in expected:
    if e[0] == "EXPECT_STACK":
        site = e[1]
        if not any(any(site in f for f in frames) for _, frames in events):
            failures.append(f"no event has {site} in its stack (cuBLAS workspace)")
        continue
    _, action, api, addr, size, site = e
    addr = int(addr, 16)
    match = [(f, fr) for f, fr in events
             if f["action"] == action and int(f.get("addr", "0"), 16) == addr]
    if not match:
        failures.append(f"missing: {action} {api} at {hex(addr)}")
        continue
    f, frames = match[0]
    if int(f["size"]) != int(size):
        failures.append(f"{api} at {hex(addr)}: size {f['size']}, expected {size}")
    if not frames or api not in frames[0]:
        failures.append(f"{api} at {hex(addr)}: innermost frame is {frames[:1]}, expected the API")
    if site != "main" and not any(site in fr for fr in frames):
        failures.append(f"{api} at {hex(addr)}: stack lacks {site}: {frames}")
    if api == "cudaHostAlloc" and f["device"] != "-1":
        failures.append(f"cudaHostAlloc recorded on device {f['device']}, expected -1 (host)")

print(f"{len(expected)} expectations, {len(events)} events in the trace")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("CUPTI trace ok")
