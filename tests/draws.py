"""Comparing the parameters ringloader draws with torchvision's own draws."""

from __future__ import annotations

import numpy as np
from scipy import stats


def same_categories(a: list, b: list, what: str) -> float:
    """Chi-square test that two samples of categories come from one
    distribution; asserts p > 0.01 and returns p."""
    cats = sorted(set(a) | set(b), key=str)
    table = np.array([[a.count(c) for c in cats], [b.count(c) for c in cats]])
    table = table[:, table.sum(0) > 0]
    p = stats.chi2_contingency(table)[1]
    assert p > 0.01, f"{what}: p = {p:.4g}"
    return p
