"""robostream train's refuse_sharded given each of accelerate's sharded modes (accelerate picks them on GPUs only):
`accepted` or the refusal, as one JSON line."""

import json
from types import SimpleNamespace

from accelerate.utils import DistributedType

from robostream.lerobot.train import refuse_sharded

results = {}
for name, mode, fsdp2, orig in (
    ("FSDP", "FSDP", False, True),
    ("FSDP2", "FSDP", True, True),
    ("FSDP flat", "FSDP", False, False),
    ("DEEPSPEED", "DEEPSPEED", False, False),
    ("MEGATRON_LM", "MEGATRON_LM", False, False),
):
    plugin = SimpleNamespace(use_orig_params=orig)
    accelerator = SimpleNamespace(
        distributed_type=DistributedType[mode], is_fsdp2=fsdp2, state=SimpleNamespace(fsdp_plugin=plugin)
    )
    try:
        refuse_sharded(accelerator)
        results[name] = "accepted"
    except ValueError as exc:
        results[name] = str(exc)
print(json.dumps(results))
