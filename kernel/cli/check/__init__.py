"""``inferd check``: what serving a repository would make of each model, found without serving
(``walk``), its ensemble checks, its report and the command's output."""
