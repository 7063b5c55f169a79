"""Results after a run: the results file, read and appended to (``store``), whole files written
atomically (``atomic``), comparing two results files (``compare``), the views shared by the renderers
(``views``), the run's tables (``tables``), the Markdown report (``markdown``, written with its figures by
``report``) and the figures: what each shows (``figures``) and their drawing (``plot``, needs matplotlib)."""
