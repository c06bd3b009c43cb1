#!/usr/bin/env python3
"""make_csv.py — the CSV fixture test_csv reads (run from the repository's
root; output committed): blobs.csv, 600 rows of 4 features (three Gaussian
clusters, one a class) and a 'species' column of class indices 0..2 placed
between the features, as a user's table might have it, with a quoted cell
and a header of names."""
import csv

import numpy as np

rng = np.random.default_rng(7)
centres = np.array([[0, 0, 0, 0], [3, 3, 0, 1], [0, 3, 3, -1]], dtype=float)
labels = rng.integers(0, 3, size=600)
features = centres[labels] + rng.normal(scale=0.8, size=(600, 4))
with open("tests/csv/blobs.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["sepal length", "sepal width", "species", "petal length",
                "petal width"])
    for i, (x, y) in enumerate(zip(features, labels)):
        row = [f"{x[0]:.4f}", f"{x[1]:.4f}", str(y), f"{x[2]:.4f}",
               f"{x[3]:.4f}"]
        if i == 5:
            row[0] = '"' + row[0] + '"'  # a quoted number reads as one
        w.writerow(row) if i != 5 else f.write(",".join(row) + "\r\n")
