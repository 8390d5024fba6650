"""What a web process loads before its first request: the embedder, and the libraries ranking, fitting and phrase
variants use, which the modules import only when first used so that other processes (commands, workers, tests)
start fast."""

import logging

from embeddings.embedders import get_embedder
from learning.decision import lexical, lexical_row
from learning.variants import word_zipf

logger = logging.getLogger(__name__)


def preload() -> None:
    """Import scikit-learn, SciPy and wordfreq's English list now, not in the first request that needs them."""
    import scipy.optimize  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.model_selection  # noqa: F401
    import sklearn.preprocessing  # noqa: F401

    lexical(["warm"])
    lexical_row("warm")
    word_zipf("warm")
    # every web worker process, not only the one a readiness probe reaches: the first request each served took
    # seconds (the model loaded and its first run) under gunicorn with several workers
    try:
        embedder = get_embedder()
        if embedder.in_process:
            embedder.inner.embed_batch(["warm"])
    except Exception as exc:  # whatever the backend raised: the process starts; /readyz says so, a request tries again
        logger.warning("the embedder did not load at start: %s: %s", exc.__class__.__name__, exc)
