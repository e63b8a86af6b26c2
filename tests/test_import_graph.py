"""No module of localspec imports, directly or through others, a module that imports it back.

import-linter's layer contracts keep the packages in order; a cycle inside one package (or through
imports inside functions or under TYPE_CHECKING, which grimp reads too) would slip past them, so it is checked here.
"""

from __future__ import annotations

import grimp


def test_localspec_has_no_import_cycle():
    graph = grimp.build_graph("localspec")
    cycles = sorted(
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.chain_exists(importer=imported, imported=module)
    )
    assert cycles == []
