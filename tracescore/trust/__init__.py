"""Numbers a team can trust: judge vs human agreement, judge-corrected estimates, label plans.

Pure statistics on lists and small dataclasses — no database access — so the report, compare,
calibrate and monitor code can call them with data from either backend (issue 17).

- :mod:`.agreement` — yes/no (accuracy, Cohen's κ, confusion matrix) and numeric (Spearman,
  MAE) agreement of a judge with human labels, and the judge's bias with its interval.
- ``ppi_mean`` / ``stratified_ppi_mean`` (:mod:`tracescore.stats.ppi`, the statistics floor) —
  prediction-powered inference of a score's mean (PPI / PPI++, and stratified PPI++ for labels
  drawn by a plan), beside the plain judge mean and the labels-only mean.
- :mod:`.plan` — which records to label: a seeded stratified random design over the judge's
  score bands and segments, with Neyman-type allocation.
- :mod:`.selection` — whether labels were drawn as the plan (or a uniform draw) says.
"""

from tracescore.stats.ppi import ppi_mean as ppi_mean
from tracescore.stats.ppi import stratified_ppi_mean as stratified_ppi_mean
from tracescore.trust.agreement import binary_agreement as binary_agreement
from tracescore.trust.agreement import numeric_agreement as numeric_agreement
from tracescore.trust.plan import make_plan as make_plan
