import ctypes, time, torch, json, sys
sys.path.insert(0, "tests/gpu")
from vmm_call_costs import Driver, MiB
torch.cuda.set_device(0); torch.zeros(1, device="cuda")
d = Driver(0)
page = 8 * MiB
va = ctypes.c_ulonglong()
d("cuMemAddressReserve", ctypes.byref(va), ctypes.c_size_t(1 << 30), ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
base = va.value
h1, _ = d.create(page); h2, _ = d.create(page)
out = {}
m1 = d.map(base, page, h1); a1 = d.set_access(base, page)
out["memset_after_grant"] = d.lib.cuMemsetD8_v2(ctypes.c_ulonglong(base), ctypes.c_ubyte(1), ctypes.c_size_t(page))
d.unmap(base, page)
m2 = d.map(base, page, h2)
out["memset_remapped_no_grant"] = d.lib.cuMemsetD8_v2(ctypes.c_ulonglong(base), ctypes.c_ubyte(1), ctypes.c_size_t(page))
a2 = d.set_access(base, page)
out["memset_remapped_granted"] = d.lib.cuMemsetD8_v2(ctypes.c_ulonglong(base), ctypes.c_ubyte(1), ctypes.c_size_t(page))
torch.cuda.synchronize()
out.update(map_first=m1, grant_first=a1, map_again=m2, grant_again=a2)
d.unmap(base, page); d.release(h1); d.release(h2)
print(json.dumps(out))
