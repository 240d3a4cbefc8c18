# verify --runtime: which shared objects a python that imports torch maps.
import json
import torch
paths = set()
for line in open("/proc/self/maps"):
    parts = line.split(None, 5)
    if len(parts) == 6 and ".so" in parts[5]:
        paths.add(parts[5].strip())
print(json.dumps({"torch": torch.__file__, "maps": sorted(paths)}))
