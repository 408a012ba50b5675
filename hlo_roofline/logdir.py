"""Where reports live in a TensorBoard logdir: ``<logdir>/<run>/plugins/hlo_roofline/report.json``
(and ``report.csv``). One definition for the writer (:meth:`Report.write_tensorboard`) and the
TensorBoard plugin; standard library only, so the plugin's start-up stays light."""

from __future__ import annotations

PLUGIN_NAME = "hlo_roofline"  # TensorBoard's plugin name: the folder under <run>/plugins/
REPORT_JSON = "report.json"
REPORT_CSV = "report.csv"
# The explorer's ranked layouts, at the logdir's root beside one run per candidate (the run's name
# is the row's ``run``): ``hlo_roofline.explorer.Exploration.write_tensorboard`` writes it.
EXPLORE_JSON = "hlo_roofline_explore.json"
