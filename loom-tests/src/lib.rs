//! Empty unless built with `--cfg loom`: the models live in `tests/`.
