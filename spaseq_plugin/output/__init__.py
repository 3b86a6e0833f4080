"""Result sinks: the file formats (``formats``: jsonl, csv, tsv, json, trig)
and the other built-in sinks (``sinks``: webhooks, Python callbacks),
registered as default plugins through the ``spaseq_result_sinks`` hook."""
