"""Chapter code for document 002 (MIFA, unbiased MIFA and their momentum variants): one module per page
(`quadratic`, `logistic`, `theory`), what the pages share (`common`), the document's items and the pages'
checks (`items`), and the pieces the pages run on: the methods, ZeroSARAH among them, and their runner
(`methods`), the theory page's experiments (`experiments`), test problems (`problems`), complexity measurements
(`complexity`) and one-step inequalities (`bounds`)."""
