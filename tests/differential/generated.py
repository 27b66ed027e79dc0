"""Generated statements: a seeded random generator over the harness's schema.

Random projections, filters, aggregations, joins between the tables (across metastores and
through links), IN / EXISTS / scalar subqueries, set operations, CTEs and windows, with names
in random case, ``VERSION AS OF`` and ``USE ns;`` — so that the next bug of the classes the
hand-written corpus covers is found here. The same seed gives the same statements.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.differential.corpus import Case

NUM, STR, BOOL, TS = "num", "str", "bool", "ts"

ORDERS = {"id": NUM, "customer_id": NUM, "amount": NUM, "price": NUM, "qty": NUM, "status": STR,
          "note": STR, "paid": BOOL, "ts": TS}  # fmt: skip
CUSTOMERS = {"id": NUM, "CreditLimit": NUM, "SignupScore": NUM, "Name": STR, "Region": STR, "vip": BOOL,
             "ts": TS}  # fmt: skip
ITEMS = {"id": NUM, "order_id": NUM, "weight": NUM, "unit_price": NUM, "sku": STR, "tags": STR, "ts": TS}


@dataclass(frozen=True)
class T:
    """A table or link: its catalog name, its columns, the versions it may be read at, and the
    name ``t@b`` reads it by inside its namespace (links)."""

    name: str
    columns: dict[str, str]
    versions: tuple[int, ...] = ()
    via: str | None = None


TABLES = [
    T("shop.orders", ORDERS, (1, 2, 3)),
    T("sales.orders", ORDERS),
    T("sales_eu.orders", ORDERS),
    T("mirror.orders", ORDERS, (2, 3), via="orders@shop"),
    T("shop.customers", CUSTOMERS, (1,)),
    T("mirror.clients", CUSTOMERS, via="customers@shop"),
    T("shop.items", ITEMS),
    T("sales.shop_items", ITEMS, via="items@shop"),
]
BY_KIND = {"orders": [t for t in TABLES if t.columns is ORDERS],
           "customers": [t for t in TABLES if t.columns is CUSTOMERS],
           "items": [t for t in TABLES if t.columns is ITEMS]}  # fmt: skip
# (left kind, left column, right kind, right column) that join meaningfully
JOINS = [
    ("orders", "customer_id", "customers", "id"),
    ("orders", "id", "items", "order_id"),
    ("orders", "customer_id", "orders", "customer_id"),
    ("orders", "status", "orders", "status"),
    ("customers", "id", "items", "order_id"),
    ("orders", "id", "orders", "id"),
]
LITERALS = {
    NUM: ["0", "1", "2", "3", "5", "10", "42", "101", "0.5", "12.0", "-1"],
    STR: ["'new'", "'shipped'", "'EU'", "'US'", "'A-1'", "'red,big'", "''", "'Ada'"],
    BOOL: ["true", "false"],
    TS: [
        "TIMESTAMP '2026-11-03 12:00:00'",
        "TIMESTAMP '2026-10-03 00:00:00'",
        "TIMESTAMP '2026-11-06 06:42:00'",
    ],
}


class _Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.namespace: str | None = None

    def pick(self, items):
        return self.rng.choice(items)

    def cased(self, name: str) -> str:
        how = self.rng.random()
        if how < 0.15:
            return name.upper()
        if how < 0.25:
            return ".".join(p.capitalize() for p in name.split("."))
        if how < 0.3:
            return ".".join(f"`{p}`" for p in name.split("."))
        return name

    def ref(self, t: T, versioned: bool = True) -> str:
        """How the statement names ``t``: qualified in any case, short or ``t@b`` inside a USE."""
        ns, local = t.name.split(".")
        if self.namespace == ns:
            text = t.via if t.via and self.rng.random() < 0.5 else local
        else:
            text = self.cased(t.name)
        if versioned and t.versions and self.rng.random() < 0.2:
            text += f" VERSION AS OF {self.pick(t.versions)}"
        return text

    def col(self, t: T, alias: str, kinds: tuple[str, ...] = (NUM, STR, BOOL, TS)) -> tuple[str, str]:
        name, kind = self.pick([(c, k) for c, k in t.columns.items() if k in kinds])
        shown = name.lower() if self.rng.random() < 0.2 else name
        return f"{alias}.{shown}", kind

    def pred(self, t: T, alias: str) -> str:
        c, kind = self.col(t, alias)
        r = self.rng.random()
        if r < 0.15:
            return f"{c} IS {'NOT ' if self.rng.random() < 0.5 else ''}NULL"
        if kind == BOOL:
            return c if r < 0.6 else f"NOT {c}"
        if kind == STR and r < 0.35:
            return f"{c} LIKE '%{self.pick(['e', 'a', 'o', 'A'])}%'"
        if r < 0.45:
            return f"{c} IN ({', '.join(self.rng.sample(LITERALS[kind], 2))})"
        op = self.pick(["=", "<>", "<", "<=", ">", ">="])
        return f"{c} {op} {self.pick(LITERALS[kind])}"

    def where(self, t: T, alias: str) -> str:
        n = self.rng.choice([0, 1, 1, 2])
        preds = [self.pred(t, alias) for _ in range(n)]
        joiner = f" {self.pick(['AND', 'OR'])} "
        return f" WHERE {joiner.join(preds)}" if preds else ""

    def projection(self, t: T, alias: str) -> str:
        cols = {self.col(t, alias)[0] for _ in range(self.rng.randint(1, 4))}
        return ", ".join(sorted(cols))

    def table(self, kind: str | None = None) -> T:
        choices = BY_KIND[kind] if kind else TABLES
        local = [t for t in choices if t.name.split(".")[0] == self.namespace]
        return self.pick(local if local and self.rng.random() < 0.6 else choices)

    # -- shapes ---------------------------------------------------------------------------------
    def select(self) -> str:
        t = self.table()
        return f"SELECT {self.projection(t, 'a')} FROM {self.ref(t)} a{self.where(t, 'a')}"

    def aggregate(self) -> str:
        t = self.table()
        g, _ = self.col(t, "a", (STR, BOOL))
        m, _ = self.col(t, "a", (NUM,))
        agg = self.pick(["sum", "min", "max", "avg", "count"])
        having = f" HAVING count(*) > {self.pick([0, 1, 2])}" if self.rng.random() < 0.4 else ""
        grouping = self.pick(["GROUP BY {g}", "GROUP BY {g}", "GROUP BY ROLLUP ({g})", "GROUP BY CUBE ({g})"])
        return (
            f"SELECT {g}, {agg}({m}) AS v, count(*) AS n FROM {self.ref(t)} a{self.where(t, 'a')} "
            f"{grouping.format(g=g)}{having}"
        )

    def join(self) -> str:
        lk, lc, rk, rc = self.pick(JOINS)
        left, right = self.table(lk), self.table(rk)
        how = self.pick(
            ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "JOIN", "LEFT SEMI JOIN", "LEFT ANTI JOIN"]
        )
        cols = self.projection(left, "a")
        if "SEMI" not in how and "ANTI" not in how:
            cols += ", " + self.projection(right, "b")
        return (
            f"SELECT {cols} FROM {self.ref(left)} a {how} {self.ref(right)} b ON a.{lc} = b.{rc}"
            f"{self.where(left, 'a')}"
        )

    def in_subquery(self) -> str:
        lk, lc, rk, rc = self.pick(JOINS)
        if self.rng.random() < 0.5:
            lk, lc, rk, rc = rk, rc, lk, lc
        left, right = self.table(lk), self.table(rk)
        neg = "NOT " if self.rng.random() < 0.4 else ""
        inner_where = self.where(right, "b")
        return (
            f"SELECT {self.projection(left, 'a')} FROM {self.ref(left)} a WHERE a.{lc} {neg}IN "
            f"(SELECT b.{rc} FROM {self.ref(right)} b{inner_where})"
        )

    def exists(self) -> str:
        lk, lc, rk, rc = self.pick(JOINS)
        left, right = self.table(lk), self.table(rk)
        neg = "NOT " if self.rng.random() < 0.4 else ""
        extra = f" AND {self.pred(right, 'b')}" if self.rng.random() < 0.5 else ""
        return (
            f"SELECT {self.projection(left, 'a')} FROM {self.ref(left)} a WHERE {neg}EXISTS "
            f"(SELECT 1 FROM {self.ref(right)} b WHERE b.{rc} = a.{lc}{extra})"
        )

    def scalar(self) -> str:
        lk, lc, rk, rc = self.pick(JOINS)
        left, right = self.table(lk), self.table(rk)
        m, _ = self.col(right, "b", (NUM,))
        agg = self.pick(["count(*)", f"max({m})", f"sum({m})", f"min({m})"])
        correlated = f" WHERE b.{rc} = a.{lc}" if self.rng.random() < 0.7 else ""
        return (
            f"SELECT a.id, (SELECT {agg} FROM {self.ref(right)} b{correlated}) AS s "
            f"FROM {self.ref(left)} a{self.where(left, 'a')}"
        )

    def setop(self) -> str:
        op = self.pick(["UNION ALL", "UNION", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"])
        a, b = self.table(), self.table()
        ca, _ = self.col(a, "a", (NUM,))
        cb, _ = self.col(b, "b", (NUM,))
        return (
            f"SELECT CAST({ca} AS DOUBLE) AS v FROM {self.ref(a)} a{self.where(a, 'a')} {op} "
            f"SELECT CAST({cb} AS DOUBLE) FROM {self.ref(b)} b{self.where(b, 'b')}"
        )

    def cte(self) -> str:
        t = self.table()
        other = self.table()
        k = self.pick(["id"])
        return (
            f"WITH c AS (SELECT * FROM {self.ref(t)} a{self.where(t, 'a')}) SELECT count(*) AS n, "
            f"count(DISTINCT x.{k}) AS d FROM c x JOIN {self.ref(other)} b ON x.{k} = b.id "
            f"WHERE x.{k} IN (SELECT {k} FROM c)"
        )

    def window(self) -> str:
        t = self.table()
        g, _ = self.col(t, "a", (STR, BOOL))
        m, _ = self.col(t, "a", (NUM,))
        fn = self.pick(["row_number()", "rank()", f"sum({m})", f"lag({m})", "count(*)", f"max({m})"])
        frame = self.pick(
            [
                "",
                " ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                " ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING",
            ]
        )
        if fn in ("row_number()", "rank()") or fn.startswith("lag"):
            frame = ""
        return f"SELECT a.id, {fn} OVER (PARTITION BY {g} ORDER BY a.id{frame}) AS w FROM {self.ref(t)} a"

    def statement(self) -> str:
        self.namespace = None
        use = ""
        if self.rng.random() < 0.2:
            self.namespace = self.pick(["shop", "sales", "mirror", "sales_eu"])
            use = f"USE {self.namespace}; "
        shape = self.pick([self.select, self.select, self.aggregate, self.join, self.join, self.in_subquery,
                           self.exists, self.scalar, self.setop, self.cte, self.window])  # fmt: skip
        return use + shape()


def generate(seed: int = 25, count: int = 100) -> list[Case]:
    """``count`` statements from ``seed``, each a case ``gen-NNN``."""
    gen = _Gen(random.Random(seed))
    return [Case(f"gen-{n:03d}", gen.statement()) for n in range(1, count + 1)]
