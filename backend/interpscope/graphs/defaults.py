"""Defaults and limits of attribution graphs (no imports: the command line's parser reads them at start-up)."""
DEFAULT_NODE_BUDGET = 80  # feature and error nodes kept by pruning
DEFAULT_EDGE_BUDGET = 400  # edges kept by pruning
DEFAULT_MAX_FEATURE_NODES = 128  # features whose rows are computed, most influential first (64 tokens: ~60 s at load 6)
MAX_TOKENS = 128  # longest prompt traced
BATCH = 64  # features expanded between two rankings by influence
CHUNK = 16  # feature rows per linear backward pass (alike rows together: a pass stops at their highest read)
DEFAULT_MAX_LOGITS = 1  # logit nodes: the target alone (circuit-tracer's default is up to 10 covering p 0.95)
MAX_LOGITS = 10  # most logit nodes a graph may hold (circuit-tracer's default max_n_logits)
DEFAULT_LOGIT_PROBABILITY = 0.95  # with more than one logit node: add top tokens until they cover this probability
CONVENTIONS = ("interpscope", "circuit-tracer")  # build_graph's conventions (interpscope.graphs.convention)
CT_NODE_THRESHOLD = 0.8  # circuit-tracer prune_graph's default node and edge thresholds
CT_EDGE_THRESHOLD = 0.98
CT_MAX_LOGITS = 10  # circuit-tracer attribute()'s default max_n_logits
