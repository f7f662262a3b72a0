"""Chapter code of the lecture notes on heterogeneous and correlated client availability (document 001),
one module per page: settings and profiles, the notes' worked examples and claims, figure helpers.
Algorithms (samplers such as CA-Fed, aggregation rules) live in the package (`flkit.sample`,
`flkit.aggregate`), participation processes in `flkit.participation`."""
