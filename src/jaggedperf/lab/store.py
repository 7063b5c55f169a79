"""Placeholder until the results store lands (write_json / write_csv)."""
import json


def write_json(path, record):
    with open(path, "w") as f:
        json.dump(record.to_dict(), f, indent=1)


def write_csv(path, results):
    raise NotImplementedError
