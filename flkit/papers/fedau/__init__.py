"""Chapter code for document 000 (FedAU): one module per page."""
