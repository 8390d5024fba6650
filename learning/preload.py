"""What a web process loads before its first request: the libraries ranking, fitting and phrase variants use,
which the modules import only when first used so that other processes (commands, workers, tests) start fast."""

from learning.decision import lexical
from learning.variants import word_zipf


def preload() -> None:
    """Import scikit-learn, SciPy and wordfreq's English list now, not in the first request that needs them."""
    import scipy.optimize  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.model_selection  # noqa: F401
    import sklearn.preprocessing  # noqa: F401

    lexical(["warm"])
    word_zipf("warm")
