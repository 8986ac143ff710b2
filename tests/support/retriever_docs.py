"""Two hand-written documents the retriever tests add to a generated corpus: titles no generated
document shares, so a title query has exactly one right answer. Search-R1 corpus rows, wiki-18 style: the quoted
title on the first line."""

EXTRA_DOCS = [
    {"id": "wiki-1", "contents": '"Harbour of Ostrevant"\nThe harbour of Ostrevant freezes every winter.'},
    {
        "id": "wiki-2",
        "contents": '"Quellmark Observatory"\nQuellmark Observatory was built on a basalt ridge.',
    },
]
