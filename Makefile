# Convenience targets; the scripts under scripts/ are the source of truth.
NB ?=
PROFILE ?= smoke
ARGS ?=

.PHONY: book test run run-all publish
book:
	bash scripts/build_book.sh
test:
	bash scripts/test.sh
run:          # make run NB=notebooks/mifa/quadratic.ipynb PROFILE=paper ARGS='-p seeds "[0,1]"'
	bash scripts/setup_env.sh && .venv/bin/python -m flkit.run $(NB) -p profile $(PROFILE) $(ARGS)
run-all:
	bash scripts/setup_env.sh && .venv/bin/python -m flkit.run --all -p profile $(PROFILE) $(ARGS)
publish: book  # push _build/html to the gh-pages branch (not run in CI)
	.venv/bin/ghp-import -n -p -f _build/html
