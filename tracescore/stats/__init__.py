"""The statistics floor of the read side: pure computation, no I/O, no SQL.

- :mod:`.moments`: ``Moments`` (n, sum, sum of squares: what the rollups keep);
- :mod:`.estimate`: ``Estimate``, the one type of a value with its interval, n and method,
  and ``Difference``;
- :mod:`.fixed`: fixed-sample intervals and tests (t, Wilson, Welch, Newcombe, range bound),
  p-value adjustment and the verdict words (re-exported here);
- :mod:`.confseq`: anytime-valid confidence sequences (PrPl-EB, normal mixture) and alpha
  spending; the monitors that run them live in :mod:`tracescore.monitor`;
- :mod:`.ppi`: judge-corrected means (PPI / PPI++ / stratified PPI).

This package imports nothing of tracescore but :mod:`tracescore._internal` (an import-linter
contract in pyproject.toml). scipy and numpy are imported lazily, inside the functions that
need them, so importing it is cheap.
"""

from .estimate import CarriesEstimate as CarriesEstimate
from .estimate import CarriesStoredEstimate as CarriesStoredEstimate
from .estimate import Difference as Difference
from .estimate import Estimate as Estimate
from .estimate import stored_estimate as stored_estimate
from .fixed import CHANGED as CHANGED
from .fixed import IMPROVED as IMPROVED
from .fixed import NO_CHANGE as NO_CHANGE
from .fixed import NO_EVIDENCE as NO_EVIDENCE
from .fixed import NO_SPREAD as NO_SPREAD
from .fixed import NOT_ENOUGH_DATA as NOT_ENOUGH_DATA
from .fixed import REGRESSED as REGRESSED
from .fixed import VERDICTS as VERDICTS
from .fixed import adjust_pvalues as adjust_pvalues
from .fixed import check_conf as check_conf
from .fixed import mean_ci as mean_ci
from .fixed import mean_difference as mean_difference
from .fixed import range_bound as range_bound
from .fixed import rate_ci as rate_ci
from .fixed import rate_difference as rate_difference
from .fixed import t_quantile as t_quantile
from .fixed import verdict as verdict
from .fixed import z_quantile as z_quantile
from .moments import Moments as Moments
