"""Two epochs of the streaming loader over a dataset, single frames (2 workers, batch 32); prints samples/s of the
iteration on stderr. Timed as a whole process by `farm-bench` against another checkout (PYTHONPATH=<tree>):

    farm-bench -n 6 --vs "sh -c 'cd BASE && exec env PYTHONPATH=BASE python benchmarks/epoch_loop.py DS'" \\
        -- sh -c 'cd NEW && exec env PYTHONPATH=NEW python benchmarks/epoch_loop.py DS'
"""

import sys
import time

from robostream import StreamingDataLoader, StreamingLeRobotDataset


def main(root: str) -> None:
    dataset = StreamingLeRobotDataset(root=root, return_uint8=True, seed=1)
    loader = StreamingDataLoader(dataset, batch_size=32, num_workers=2)
    started, samples = time.perf_counter(), 0
    for epoch in range(2):
        dataset.set_epoch(epoch)
        for batch in loader:
            samples += batch["index"].shape[0]
    print(f"{samples / (time.perf_counter() - started):.0f} samples/s", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
