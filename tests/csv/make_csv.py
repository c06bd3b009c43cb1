#!/usr/bin/env python3
"""make_csv.py — the CSV fixtures test_csv reads (run from the repository's
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

# regression.csv: a house-price-like table, 500 rows of 3 features and a
# float target 'price' (last column), a linear function plus noise.
rng = np.random.default_rng(11)
area = rng.uniform(0.5, 2.5, size=500)
rooms = rng.integers(1, 7, size=500)
age = rng.uniform(0, 6, size=500)
price = 2 * area + 0.5 * rooms - 0.3 * age + 1 + rng.normal(scale=0.05,
                                                            size=500)
with open("tests/csv/regression.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["area", "rooms", "age", "price"])
    for a, r, g, p in zip(area, rooms, age, price):
        w.writerow([f"{a:.4f}", str(r), f"{g:.3f}", f"{p:.4f}"])
