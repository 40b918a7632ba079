"""Family corrections on a joint null: primary-first Westfall-Young and Benjamini-Hochberg."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsentry.gate.multiplicity import benjamini_hochberg, effective_levels, family_adjusted

ALPHA = 0.05


def null_draws(rho: float, k: int = 5, size: int = 4000, seed: int = 0) -> np.ndarray:
    """Uniform null p-values of k tests with pairwise correlation about rho (a Gaussian copula)."""
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    shared = rng.normal(size=(size, 1))
    z = np.sqrt(rho) * shared + np.sqrt(1 - rho) * rng.normal(size=(size, k))
    return np.asarray(norm.sf(z))


class TestBenjaminiHochberg:
    def test_hand_computed_example(self) -> None:
        """Sorted p (.005, .01, .03, .04) times 4/i, made monotone from the largest down."""
        assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx(
            [0.02, 0.04, 0.04, 0.02]
        )

    def test_single_and_empty(self) -> None:
        """One test is unadjusted; none gives none."""
        assert benjamini_hochberg([0.03]) == [0.03]
        assert benjamini_hochberg([]) == []


class TestFamilyAdjusted:
    def test_without_a_share_the_primary_keeps_its_raw_p(self) -> None:
        """share 0: the primary is tested alone at full alpha (the others only after it)."""
        adjusted = family_adjusted([0.03, 0.001, 0.2], null_draws(0.0, 3), primary=0, share=0.0)
        assert adjusted[0] == 0.03
        assert adjusted[1] == pytest.approx(0.03, abs=0.01)  # after the primary: minP of two

    def test_perfectly_correlated_others_cost_the_primary_nothing(self) -> None:
        """When the others reject only where the primary would, its level stays alpha."""
        null = null_draws(1.0, 4)
        adjusted = family_adjusted([0.04, 0.5, 0.5, 0.5], null, primary=0, share=0.2)
        assert adjusted[0] == pytest.approx(0.04)

    def test_independent_others_cost_the_primary_at_most_their_share(self) -> None:
        """Independent others take at most share * alpha: the primary's p grows by <= 1/(1 - share)."""
        null = null_draws(0.0, 5)
        adjusted = family_adjusted([0.03, 0.5, 0.5, 0.5, 0.5], null, primary=0, share=0.2)
        assert 0.03 < adjusted[0] <= 0.03 / 0.8 + 1e-9

    def test_a_strong_secondary_rejects_on_its_own(self) -> None:
        """A calibration regression without an accuracy drop still fails: the share is its own."""
        null = null_draws(0.3, 5)
        adjusted = family_adjusted([0.6, 1e-4, 0.5, 0.5, 0.5], null, primary=0, share=0.2)
        assert adjusted[1] < ALPHA and adjusted[0] >= 0.6

    def test_plain_family_is_westfall_young_min_p(self) -> None:
        """Without a primary, the smallest p is adjusted by the null law of the family's minimum."""
        null = null_draws(0.0, 3)
        adjusted = family_adjusted([0.01, 0.5, 0.9], null, primary=None, share=0.2)
        assert adjusted[0] == pytest.approx(1 - 0.99**3, abs=0.01)  # Sidak, for independent tests

    @settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @given(
        p=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=6),
        rho=st.sampled_from([0.0, 0.5, 0.9]),
        primary=st.sampled_from([None, 0]),
    )
    def test_never_below_raw_and_monotone(
        self, p: list[float], rho: float, primary: int | None
    ) -> None:
        """Adjusted p-values are at least the raw ones, at most 1, and keep the secondaries' order."""
        adjusted = np.array(
            family_adjusted(p, null_draws(rho, len(p), 500), primary=primary, share=0.2)
        )
        raw = np.array(p)
        assert np.all(adjusted >= raw - 1e-15) and np.all(adjusted <= 1.0)
        others = [j for j in range(len(p)) if j != primary]
        order = sorted(others, key=lambda j: raw[j])
        assert np.all(np.diff(adjusted[order]) >= -1e-15)

    def test_family_wise_error_at_most_alpha(self) -> None:
        """On p-values drawn from the null itself, the family rejects anything <= alpha of the time."""
        null = null_draws(0.5, 5, size=2000, seed=1)
        observed = null_draws(0.5, 5, size=2000, seed=2)
        rejected = [
            min(family_adjusted(list(row), null, primary=0, share=0.2)) < ALPHA
            for row in observed[:1000]
        ]
        assert np.mean(rejected) <= ALPHA + 0.02


class TestEffectiveLevels:
    def test_correlated_family_leaves_the_primary_nearly_alpha(self) -> None:
        """The primary's level is alpha minus what the others take where it would not reject."""
        levels = effective_levels(null_draws(0.9, 5), primary=0, share=0.2, alpha=ALPHA)
        assert 0.045 < levels[0] <= ALPHA
        assert 0.0 < levels[1] < 0.2 * ALPHA

    def test_plain_family_level_is_the_alpha_quantile_of_the_minimum(self) -> None:
        """Without a primary every test meets the null minimum's alpha-quantile (Sidak if independent)."""
        levels = effective_levels(null_draws(0.0, 4), primary=None, share=0.2, alpha=ALPHA)
        assert levels[0] == pytest.approx(1 - (1 - ALPHA) ** 0.25, rel=0.1)
