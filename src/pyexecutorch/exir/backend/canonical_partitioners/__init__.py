"""Ready-made partitioners and partition helpers, under the official
``executorch.exir.backend.canonical_partitioners`` path."""

from pyexecutorch.exir.backend.canonical_partitioners.all_node_partitioner import (
    AllNodePartitioner,
)
from pyexecutorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
    generate_partitions_from_list_of_nodes,
    generate_pattern_op_partitions,
)

__all__ = [
    "AllNodePartitioner",
    "generate_partitions_from_list_of_nodes",
    "generate_pattern_op_partitions",
]
