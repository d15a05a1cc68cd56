"""Print the PCI display/accelerator functions of this host as JSON: [{"vendor": "0x1002", ...}].

Reads sysfs only (lspci may be absent). Run by the rocm and cuda roles before installing anything.
"""

import glob
import json
import os

found = []
for dev in sorted(glob.glob("/sys/bus/pci/devices/*")):
    try:
        with open(os.path.join(dev, "vendor")) as f:
            vendor = f.read().strip()
        with open(os.path.join(dev, "class")) as f:
            klass = f.read().strip()
    except OSError:
        continue
    # 0x03xxxx display controllers, 0x12xxxx processing accelerators (Instinct, some datacenter GPUs)
    if klass.startswith(("0x03", "0x12")):
        found.append({"slot": os.path.basename(dev), "vendor": vendor, "class": klass})
print(json.dumps(found))
