"""`robostream train` with ACT's per-sample loss (per_sample_act.py): what `--sample_weighting.*` needs.

python train_per_sample_act.py FLAGS...
"""

import sys

from per_sample_act import per_sample_losses

from robostream.lerobot.train import main

sys.argv = ["robostream train", *sys.argv[1:]]
with per_sample_losses():
    main()
