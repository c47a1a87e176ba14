"""Where debug handles live on nodes (the official ``exir.debug_handle_utils`` names):
``node.meta[DEBUG_HANDLE_KEY]``, from 1; ``UNSET_DEBUG_HANDLE`` marks none."""

DEBUG_HANDLE_KEY = "debug_handle"
FROM_NODE_KEY = "from_node"
UNSET_DEBUG_HANDLE = 0

__all__ = ["DEBUG_HANDLE_KEY", "FROM_NODE_KEY", "UNSET_DEBUG_HANDLE"]
