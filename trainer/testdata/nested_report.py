"""Reports three steps from every rank of a launcher nested inside a gotune
worker: gotune.py lets only the nested launcher's rank 0 print them."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import gotune  # noqa: E402

for step in (1, 2, 3):
    gotune.report(step=step, rank=int(os.environ["RANK"]), nested=int(gotune.nested()))
