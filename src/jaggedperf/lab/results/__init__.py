"""Results after a run: the results file (``store``), comparing two of them (``compare``), the views
shared by the renderers (``views``), the run's tables (``tables``), the Markdown report (``markdown``,
written with its figures by ``report``) and the figures (``plot``, needs matplotlib)."""
