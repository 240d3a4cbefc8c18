# verify --smoke: one convolution forward and backward on the GPU.
import json, time
import torch
start = time.time()
dev = torch.device("cuda")
x = torch.randn(2, 3, 32, 32, device=dev, requires_grad=True)
conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(dev)
y = conv(x)
y.sum().backward()
torch.cuda.synchronize()
print(json.dumps({"device": torch.cuda.get_device_name(0), "seconds": time.time() - start}))
