"""rdflib integration: ``Graph.query(text, processor="spaseq")`` (``processor``,
registered under rdflib's ``rdf.plugins.queryprocessor`` entry point)."""
