"""`python -m robostream.bench ...`: the same as `robostream bench ...`."""

import argparse
import sys

from robostream.bench.arguments import add_bench_arguments
from robostream.bench.command import run_bench

parser = argparse.ArgumentParser(prog="python -m robostream.bench", description="Benchmark the data pipeline.")
add_bench_arguments(parser)
sys.exit(run_bench(parser.parse_args(sys.argv[1:])))
