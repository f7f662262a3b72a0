"""Chapter code, one module per document: settings and profiles, the document's reference numbers, the
claims checked, figure helpers. No algorithm lives here: the rules are in `flkit.aggregate`, the samplers in
`flkit.sample`, the loop in `flkit.fl`, local training in `flkit.engine` / `flkit.tasks`."""
