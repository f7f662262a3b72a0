"""Chapter code of the lecture notes on heterogeneous and correlated client availability (document 001), in the
chapters' template: `common` (what the pages share: the document, the results store, profiles, the page's
clock), `items` (the notes' items and how each page's checks map onto them), one module per page (`weights`,
`markov`, `sampling`, `cafed`: settings and profiles, stored-run configs, the checks and their verdicts, figure
helpers) and the pages' own pieces (`moments`, `server_step`, `theorem1`, `schemes`). Algorithms (samplers
such as CA-Fed, aggregation rules) live in the package (`flkit.sample`, `flkit.aggregate`), participation
processes in `flkit.participation`."""
