#!/usr/bin/env python3
"""Validates kcert JSON outputs against docs/schema/*.schema.json (python3-jsonschema).

  validate_json.py SCHEMA_NAME FILE      a JSON document (FILE '-' = stdin)
  validate_json.py --lines SCHEMA FILE   one JSON object per line (spools, tail-fit)
Prints "FILE: N document(s) valid against SCHEMA" or the first error; exit 0/1.
"""
import json
import os
import sys

import jsonschema
from jsonschema import Draft202012Validator, RefResolver

SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "schema")


def main():
    args = sys.argv[1:]
    lines = args[0] == "--lines"
    if lines:
        args = args[1:]
    name, path = args
    with open(os.path.join(SCHEMAS, name)) as f:
        schema = json.load(f)
    store = {}
    for other in os.listdir(SCHEMAS):
        with open(os.path.join(SCHEMAS, other)) as f:
            store[other] = json.load(f)
    resolver = RefResolver(base_uri="file://" + os.path.abspath(SCHEMAS) + "/", referrer=schema, store=store)
    validator = Draft202012Validator(schema, resolver=resolver)
    text = sys.stdin.read() if path == "-" else open(path).read()
    docs = [json.loads(l) for l in text.splitlines() if l.strip()] if lines else [json.loads(text)]
    for i, doc in enumerate(docs):
        try:
            validator.validate(doc)
        except jsonschema.ValidationError as e:
            where = "/".join(str(p) for p in e.absolute_path)
            print(f"{path}: document {i + 1} invalid against {name} at /{where}: {e.message[:300]}")
            return 1
    print(f"{path}: {len(docs)} document(s) valid against {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
