"""The hand-written corpus: statements as analysts write them, over the harness's warehouse.

Tables (:mod:`tests.differential.warehouse`): ``shop.orders`` (12 rows; versions 1, 2, 3 hold 4, 7
and 10; a rolled partition and a streaming one), ``sales.orders`` (4 rows, metastore m1) and
``sales_eu.orders`` (2 rows, m2) — the same row id in all three metastores; ``shop.customers``
(mixed-case columns ``Name``, ``Region``, ``CreditLimit``, ``SignupScore``; versions 1 and 2),
``shop.items``, ``shop.empty``; links ``mirror.orders`` → shop.orders, ``mirror.clients`` →
shop.customers, ``sales.shop_items`` → shop.items (m1 → the primary).

Rules for a statement here: its answer is deterministic whatever the file layout (no rand(), no
first() without an order, a LIMIT only after an ORDER BY on a unique key, TABLESAMPLE only as
0/100 PERCENT or counted ROWS), and its columns are scalars (an array or map is shown through
``array_join``/``to_json``/``size``), so the SQL server's answer compares as it is.
"""

# ruff: noqa: E501  (a statement reads best on one line)
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict


@dataclass(frozen=True)
class Case:
    """One statement: its id, its text, whether its rows' order is part of the answer, and — for
    a statement streampart is known to answer wrongly or refuse — why (an xfail)."""

    id: str
    sql: str
    ordered: bool = False
    known_failure: str | None = None


class _Options(TypedDict, total=False):
    """What a statement's entry may say besides its text (a :class:`Case`'s fields)."""

    ordered: bool
    known_failure: str


# (category prefix, statements); an entry is a statement, or (statement, {"ordered": True, …})
_GROUPS: list[tuple[str, list[str | tuple[str, _Options]]]] = [
    (
        "basic",
        [
            "SELECT * FROM shop.orders",
            "SELECT id, amount FROM shop.orders WHERE amount > 10",
            "SELECT id FROM shop.orders WHERE note IS NULL",
            "SELECT id, status FROM shop.orders WHERE status IN ('new', 'refund')",
            "SELECT id FROM shop.orders WHERE paid",
            "SELECT id FROM shop.orders WHERE NOT paid OR paid IS NULL",
            "SELECT count(*), count(paid), count(DISTINCT status), count(note) FROM shop.orders",
            "SELECT id, amount * qty AS total FROM shop.orders WHERE qty BETWEEN 2 AND 6",
            ("SELECT id, price FROM shop.orders ORDER BY price DESC NULLS LAST, id", {"ordered": True}),
            ("SELECT id FROM shop.orders ORDER BY id LIMIT 5", {"ordered": True}),
            ("SELECT id FROM shop.orders ORDER BY id LIMIT 3 OFFSET 4", {"ordered": True}),
            "SELECT DISTINCT status FROM shop.orders",
            "SELECT DISTINCT customer_id, paid FROM shop.orders",
            "SELECT * FROM shop.empty",
            "SELECT count(*), sum(amount), max(price) FROM shop.empty",
            "SELECT * FROM shop.customers",
            "SELECT * FROM shop.items WHERE weight >= 1.5",
            "SELECT id, note FROM shop.orders WHERE note LIKE '%o%'",
            "SELECT id, note FROM shop.orders WHERE note ILIKE 'big%' OR note RLIKE '^[a-z]+$'",
            "SELECT 1 AS one, 'x' AS x, NULL AS n, 2.5 AS d",
            "SELECT id, ts_period IS NOT NULL AS has_period FROM shop.orders",
            "SELECT count(DISTINCT ts_period) AS partitions FROM shop.orders",
        ],
    ),
    (
        "names",
        [
            "SELECT count(*) FROM SHOP.Orders",
            "SELECT count(*) FROM Shop.ORDERS",
            "SELECT Id, AMOUNT, Price FROM shop.orders",
            "SELECT name, region, creditlimit FROM shop.customers",
            "SELECT NAME, REGION FROM SHOP.CUSTOMERS WHERE REGION = 'EU'",
            "SELECT `Name`, `CreditLimit` FROM `shop`.`customers`",
            "SELECT `id`, `amount` FROM `shop`.orders",
            "SELECT shop.orders.id, shop.orders.amount FROM shop.orders",
            "SELECT shop.orders.id, orders.status FROM shop.orders WHERE shop.orders.qty > 2",
            "SELECT SHOP.ORDERS.ID FROM shop.orders",
            "SELECT shop.customers.Name, shop.orders.id FROM shop.orders JOIN shop.customers "
            "ON shop.orders.customer_id = shop.customers.id",
            "SELECT orders.id, customers.Name FROM shop.orders JOIN shop.customers "
            "ON orders.customer_id = customers.id",
            "SELECT o.id AS `Order Id`, c.Name AS `the name` FROM shop.orders o "
            "JOIN shop.customers AS c ON o.customer_id = c.id",
            "SELECT `o`.`id` FROM shop.orders AS `o` WHERE `o`.`paid`",
            "SELECT Region, count(*) FROM shop.customers GROUP BY REGION",
            "SELECT c.SignupScore, c.signupscore * 2 AS twice FROM SHOP.customers c",
            "SELECT shop.orders.* FROM shop.orders WHERE id < 3",
            "SELECT o.* FROM shop.orders o JOIN shop.customers c ON o.customer_id = c.id WHERE c.vip",
        ],
    ),
    (
        "scalar",
        [
            "SELECT (SELECT count(*) FROM shop.orders) AS n",
            "SELECT (SELECT count(*) FROM shop.orders) + (SELECT count(*) FROM shop.orders) AS n",
            "SELECT id, amount - (SELECT avg(amount) FROM shop.orders) AS diff FROM shop.orders",
            "SELECT id FROM shop.orders WHERE amount > (SELECT avg(amount) FROM shop.orders)",
            "SELECT id, (SELECT c.Name FROM shop.customers c WHERE c.id = o.customer_id) AS who "
            "FROM shop.orders o",
            "SELECT id, (SELECT count(*) FROM shop.items i WHERE i.order_id = o.id) AS lines FROM shop.orders o",
            "SELECT c.Name, (SELECT sum(o.amount) FROM shop.orders o WHERE o.customer_id = c.id) AS spent "
            "FROM shop.customers c",
            "SELECT (SELECT max(id) FROM shop.orders WHERE id < (SELECT max(id) FROM shop.orders)) AS second",
            "SELECT id FROM shop.orders o WHERE qty = (SELECT max(qty) FROM shop.orders o2 "
            "WHERE o2.customer_id = o.customer_id)",
            "SELECT (SELECT count(*) FROM shop.items) - (SELECT count(DISTINCT order_id) FROM shop.items) AS d",
            "SELECT status, count(*) FROM shop.orders GROUP BY status "
            "HAVING count(*) > (SELECT count(*) FROM shop.orders) / 6",
            "SELECT customer_id, sum(amount) FROM shop.orders GROUP BY customer_id "
            "HAVING sum(amount) > (SELECT avg(amount) FROM shop.orders)",
            "SELECT (SELECT min(ts) FROM shop.orders) AS first_ts, (SELECT max(ts) FROM shop.orders) AS last_ts",
            "SELECT id, CASE WHEN amount > (SELECT avg(amount) FROM shop.orders) THEN 'high' ELSE 'low' END "
            "FROM shop.orders",
        ],
    ),
    (
        "in_exists",
        [
            "SELECT count(*) FROM shop.orders WHERE id IN (SELECT id FROM shop.orders)",
            "SELECT id FROM shop.orders WHERE customer_id IN (SELECT id FROM shop.customers WHERE vip)",
            "SELECT id FROM shop.orders WHERE customer_id NOT IN (SELECT id FROM shop.customers WHERE vip)",
            "SELECT id FROM shop.orders WHERE customer_id NOT IN "
            "(SELECT id FROM shop.customers WHERE id IS NOT NULL)",
            "SELECT id FROM shop.orders WHERE customer_id NOT IN (SELECT customer_id FROM shop.orders)",
            "SELECT id FROM shop.orders WHERE id IN (SELECT order_id FROM shop.items WHERE sku = 'A-1')",
            "SELECT id FROM shop.orders WHERE id NOT IN (SELECT order_id FROM shop.items)",
            "SELECT id FROM shop.orders o WHERE EXISTS (SELECT 1 FROM shop.items i WHERE i.order_id = o.id)",
            "SELECT id FROM shop.orders o WHERE NOT EXISTS (SELECT 1 FROM shop.items i WHERE i.order_id = o.id)",
            "SELECT c.Name FROM shop.customers c WHERE EXISTS "
            "(SELECT * FROM shop.orders o WHERE o.customer_id = c.id AND o.paid)",
            "SELECT c.Name FROM shop.customers c WHERE NOT EXISTS "
            "(SELECT * FROM shop.orders o WHERE o.customer_id = c.id)",
            "SELECT id FROM shop.orders o WHERE EXISTS (SELECT 1 FROM shop.orders o2 "
            "WHERE o2.customer_id = o.customer_id AND o2.id <> o.id)",
            "SELECT id FROM shop.orders WHERE (customer_id, status) IN "
            "(SELECT customer_id, status FROM shop.orders WHERE paid)",
            "SELECT id FROM shop.orders WHERE customer_id IN (SELECT id FROM shop.customers "
            "WHERE Region IN (SELECT Region FROM shop.customers WHERE vip))",
            "SELECT status FROM shop.orders GROUP BY status "
            "HAVING max(id) IN (SELECT max(id) FROM shop.orders GROUP BY customer_id)",
            "SELECT id, customer_id IN (SELECT id FROM shop.customers) AS known FROM shop.orders",
            "SELECT id, EXISTS (SELECT 1 FROM shop.items i WHERE i.order_id = o.id AND i.tags LIKE '%sale%') "
            "AS on_sale FROM shop.orders o",
            "SELECT id FROM shop.items WHERE order_id IN (SELECT id FROM shop.orders WHERE id IN "
            "(SELECT order_id FROM shop.items WHERE weight > 1))",
            "SELECT id FROM shop.orders WHERE id IN (SELECT id FROM shop.orders WHERE qty > 2) "
            "AND id NOT IN (SELECT id FROM shop.orders WHERE amount > 100)",
            "SELECT o.id FROM shop.orders o WHERE o.amount > 0.0 "
            "AND o.qty > (SELECT min(qty) FROM shop.orders x WHERE x.status = o.status)",
            "SELECT id FROM shop.orders WHERE customer_id IN (SELECT id FROM shop.empty)",
            "SELECT id FROM shop.orders WHERE customer_id NOT IN (SELECT id FROM shop.empty)",
        ],
    ),
    (
        "from_subquery",
        [
            "SELECT count(*) FROM (SELECT * FROM shop.orders WHERE paid) t",
            "SELECT s.status, s.n FROM (SELECT status, count(*) AS n FROM shop.orders GROUP BY status) s "
            "WHERE s.n > 1",
            "SELECT a.id, b.id FROM (SELECT id FROM shop.orders WHERE id < 4) a "
            "CROSS JOIN (SELECT id FROM shop.orders WHERE id > 10) b",
            "SELECT max(total) FROM (SELECT customer_id, sum(amount) AS total FROM shop.orders "
            "GROUP BY customer_id) x",
            "SELECT * FROM (SELECT * FROM (SELECT id, amount FROM shop.orders) a WHERE amount > 1) b "
            "WHERE id > 3",
            "SELECT t.customer_id, t.n, c.Name FROM (SELECT customer_id, count(*) n FROM shop.orders "
            "GROUP BY customer_id) t LEFT JOIN shop.customers c ON c.id = t.customer_id",
            "SELECT count(*) FROM (SELECT id FROM shop.orders UNION ALL SELECT id FROM shop.orders "
            "WHERE id < 0)",
            "SELECT x.k, x.v FROM (SELECT id AS k, note AS v FROM shop.orders) AS x (k, v) WHERE x.k < 5",
        ],
    ),
    (
        "cte",
        [
            "WITH c AS (SELECT id FROM shop.orders) SELECT count(*) FROM c JOIN shop.orders USING (id)",
            "WITH paid AS (SELECT * FROM shop.orders WHERE paid) SELECT count(*), sum(amount) FROM paid",
            "WITH a AS (SELECT id, amount FROM shop.orders) SELECT x.id, y.id FROM a x JOIN a y "
            "ON x.amount = y.amount AND x.id < y.id",
            "WITH a AS (SELECT customer_id, sum(amount) s FROM shop.orders GROUP BY customer_id) "
            "SELECT * FROM a WHERE s > (SELECT avg(s) FROM a)",
            "WITH a AS (SELECT id FROM shop.orders), b AS (SELECT id FROM a WHERE id > 5), "
            "c AS (SELECT id FROM b WHERE id < 10) SELECT * FROM c",
            "WITH a AS (SELECT id FROM shop.orders) SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM a)",
            "WITH big AS (SELECT * FROM shop.orders WHERE amount > 50), small AS (SELECT * FROM shop.orders "
            "WHERE amount <= 50) SELECT 'big' AS k, count(*) FROM big UNION ALL SELECT 'small', count(*) FROM small",
            "WITH outer_cte AS (WITH inner_cte AS (SELECT id, qty FROM shop.orders) "
            "SELECT id FROM inner_cte WHERE qty > 3) SELECT * FROM outer_cte",
            "WITH c AS (SELECT * FROM shop.customers) SELECT o.id, c.Name FROM shop.orders o "
            "JOIN c ON o.customer_id = c.id WHERE c.id IN (SELECT id FROM c WHERE vip)",
            "WITH orders AS (SELECT id FROM shop.orders WHERE id < 3) SELECT * FROM orders",
            "WITH x AS (SELECT id FROM shop.orders) SELECT * FROM x WHERE id IN (SELECT id FROM x WHERE id > 8)",
            "WITH t AS (SELECT customer_id, amount FROM shop.orders), u AS (SELECT customer_id, max(amount) m "
            "FROM t GROUP BY customer_id) SELECT t.customer_id, t.amount FROM t JOIN u "
            "ON t.customer_id = u.customer_id AND t.amount = u.m",
            "WITH i AS (SELECT order_id, count(*) n FROM shop.items GROUP BY order_id) "
            "SELECT o.id, coalesce(i.n, 0) FROM shop.orders o LEFT JOIN i ON i.order_id = o.id",
            "WITH a AS (SELECT id FROM shop.orders WHERE paid) SELECT id FROM a "
            "EXCEPT SELECT id FROM a WHERE id > 8",
            "WITH s AS (SELECT * FROM sales.orders), e AS (SELECT * FROM sales_eu.orders) "
            "SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM e), (SELECT count(*) FROM shop.orders)",
        ],
    ),
    (
        "setop",
        [
            "SELECT id FROM shop.orders UNION ALL SELECT id FROM shop.orders",
            "SELECT id FROM shop.orders UNION SELECT id FROM shop.orders",
            "SELECT customer_id FROM shop.orders INTERSECT SELECT id FROM shop.customers",
            "SELECT id FROM shop.customers EXCEPT SELECT customer_id FROM shop.orders",
            "SELECT customer_id FROM shop.orders INTERSECT ALL SELECT customer_id FROM shop.orders WHERE paid",
            "SELECT customer_id FROM shop.orders EXCEPT ALL SELECT customer_id FROM shop.orders WHERE paid",
            "SELECT id, 'shop' AS src FROM shop.orders UNION ALL SELECT id, 'sales' FROM sales.orders "
            "UNION ALL SELECT id, 'eu' FROM sales_eu.orders",
            "SELECT status FROM shop.orders UNION SELECT status FROM sales.orders UNION "
            "SELECT status FROM sales_eu.orders",
            "SELECT count(*) FROM (SELECT * FROM shop.orders UNION ALL SELECT * FROM shop.orders "
            "UNION ALL SELECT * FROM shop.orders)",
            "SELECT id FROM shop.orders WHERE id < 5 UNION ALL SELECT id FROM shop.orders WHERE id > 9 "
            "EXCEPT SELECT 1",
            "(SELECT id FROM shop.orders ORDER BY id DESC LIMIT 2) UNION ALL "
            "(SELECT id FROM shop.orders ORDER BY id LIMIT 2)",
            "SELECT customer_id FROM shop.orders INTERSECT SELECT customer_id FROM sales.orders",
            "SELECT id FROM shop.orders EXCEPT SELECT id FROM shop.orders WHERE paid",
            "SELECT id, amount FROM shop.orders UNION ALL SELECT id, weight FROM shop.items",
            "SELECT Name AS n FROM shop.customers UNION ALL SELECT note FROM shop.orders WHERE note IS NOT NULL",
            "SELECT * FROM shop.orders WHERE id < 3 UNION ALL SELECT * FROM shop.empty",
            "SELECT id, status FROM shop.orders UNION ALL SELECT id, status FROM sales.orders ORDER BY id",
        ],
    ),
    (
        "window",
        [
            "SELECT id, row_number() OVER (ORDER BY id) AS rn FROM shop.orders",
            "SELECT id, customer_id, row_number() OVER (PARTITION BY customer_id ORDER BY id) AS rn "
            "FROM shop.orders",
            "SELECT id, rank() OVER (ORDER BY qty DESC) AS r, dense_rank() OVER (ORDER BY qty DESC) AS d "
            "FROM shop.orders",
            "SELECT id, lag(amount) OVER (ORDER BY id) AS prev, lead(amount, 2) OVER (ORDER BY id) AS nxt "
            "FROM shop.orders",
            "SELECT id, sum(amount) OVER (ORDER BY id) AS running FROM shop.orders",
            "SELECT id, sum(price) OVER (PARTITION BY customer_id ORDER BY id ROWS BETWEEN UNBOUNDED "
            "PRECEDING AND CURRENT ROW) AS running FROM shop.orders",
            "SELECT id, avg(amount) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS moving "
            "FROM shop.orders",
            "SELECT id, count(*) OVER (PARTITION BY status) AS n FROM shop.orders",
            "SELECT id, max(qty) OVER (ORDER BY qty RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) AS m "
            "FROM shop.orders",
            "SELECT id, ntile(3) OVER (ORDER BY id) AS tile, percent_rank() OVER (ORDER BY id) AS pr "
            "FROM shop.orders",
            "SELECT id, cume_dist() OVER (PARTITION BY paid ORDER BY id) AS cd FROM shop.orders",
            "SELECT id, first_value(id) OVER (PARTITION BY customer_id ORDER BY id) AS f, "
            "last_value(id) OVER (PARTITION BY customer_id ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING "
            "AND UNBOUNDED FOLLOWING) AS l FROM shop.orders",
            "SELECT * FROM (SELECT id, customer_id, row_number() OVER (PARTITION BY customer_id "
            "ORDER BY amount DESC NULLS LAST, id) rn FROM shop.orders) WHERE rn = 1",
            "SELECT id, amount / sum(amount) OVER () AS share FROM shop.orders WHERE amount > 0",
            "SELECT id, nth_value(id, 2) OVER (ORDER BY id) AS second FROM shop.orders",
            "SELECT customer_id, sum(amount) AS s, rank() OVER (ORDER BY sum(amount) DESC) AS r "
            "FROM shop.orders GROUP BY customer_id",
            "SELECT id, sum(amount) OVER w AS s, count(*) OVER w AS n FROM shop.orders "
            "WINDOW w AS (PARTITION BY paid ORDER BY id)",
            "SELECT o.id, row_number() OVER (ORDER BY o.id) rn, (SELECT count(*) FROM shop.orders) total "
            "FROM shop.orders o",
            "SELECT i.id, i.order_id, sum(i.weight) OVER (PARTITION BY i.order_id) AS w FROM shop.items i",
            "SELECT id, lag(ts) OVER (ORDER BY ts, id) AS prev_ts FROM shop.orders",
        ],
    ),
    (
        "join",
        [
            "SELECT o.id, c.Name FROM shop.orders o JOIN shop.customers c ON o.customer_id = c.id",
            "SELECT o.id, c.Name FROM shop.orders o LEFT JOIN shop.customers c ON o.customer_id = c.id",
            "SELECT o.id, c.Name FROM shop.orders o RIGHT JOIN shop.customers c ON o.customer_id = c.id",
            "SELECT o.id, c.Name FROM shop.orders o FULL OUTER JOIN shop.customers c ON o.customer_id = c.id",
            "SELECT o.id FROM shop.orders o LEFT SEMI JOIN shop.items i ON i.order_id = o.id",
            "SELECT o.id FROM shop.orders o LEFT ANTI JOIN shop.items i ON i.order_id = o.id",
            "SELECT count(*) FROM shop.orders CROSS JOIN shop.customers",
            "SELECT a.id, b.id FROM shop.orders a JOIN shop.orders b ON a.customer_id = b.customer_id "
            "AND a.id < b.id",
            "SELECT a.id, b.id FROM shop.orders a, shop.orders b WHERE a.id = b.id + 1",
            "SELECT o.id, i.sku FROM shop.orders o JOIN shop.items i USING (id)",
            "SELECT * FROM shop.orders o NATURAL JOIN shop.orders p",
            "SELECT o.id, i.sku, c.Name FROM shop.orders o JOIN shop.items i ON i.order_id = o.id "
            "LEFT JOIN shop.customers c ON c.id = o.customer_id",
            "SELECT o.id, c.Name FROM shop.orders o JOIN shop.customers c ON o.customer_id = c.id "
            "AND c.Region = 'EU' AND o.amount > 1",
            "SELECT c.Name, count(o.id) FROM shop.customers c LEFT JOIN shop.orders o "
            "ON o.customer_id = c.id GROUP BY c.Name",
            "SELECT o.id, x.m FROM shop.orders o JOIN (SELECT customer_id, max(amount) m FROM shop.orders "
            "GROUP BY customer_id) x ON x.customer_id = o.customer_id",
            "SELECT o.id, c.id FROM shop.orders o JOIN shop.customers c ON o.customer_id < c.id "
            "WHERE o.id < 4",
            "SELECT o.id, i.id FROM shop.orders o FULL JOIN shop.items i ON i.order_id = o.id "
            "WHERE o.id IS NULL OR i.id IS NULL",
            "SELECT o.id, l.m FROM shop.orders o, LATERAL (SELECT max(i.weight) AS m FROM shop.items i "
            "WHERE i.order_id = o.id) l",
            "SELECT o.id, c.Name FROM shop.orders o JOIN shop.customers c ON o.customer_id <=> c.id",
            "SELECT o.id, e.id FROM shop.orders o LEFT JOIN shop.empty e ON e.id = o.id",
            "SELECT /*+ BROADCAST(c) */ o.id, c.Name FROM shop.orders o JOIN shop.customers c "
            "ON o.customer_id = c.id",
            "SELECT /*+ MERGE(o, c) */ o.id, c.Region FROM shop.orders o JOIN shop.customers c "
            "ON o.customer_id = c.id",
        ],
    ),
    (
        "many",
        [
            "SELECT count(*) FROM shop.orders a JOIN shop.orders b ON a.id = b.id JOIN shop.orders c "
            "ON b.id = c.id JOIN shop.orders d ON c.id = d.id",
            "SELECT (SELECT count(*) FROM shop.orders) AS a, (SELECT sum(qty) FROM shop.orders) AS b, "
            "(SELECT max(id) FROM shop.orders WHERE id IN (SELECT id FROM shop.orders)) AS c",
            "SELECT id FROM shop.orders WHERE id IN (SELECT id FROM shop.orders) AND EXISTS "
            "(SELECT 1 FROM shop.orders x WHERE x.id = shop.orders.id) AND id NOT IN "
            "(SELECT id FROM shop.orders WHERE id > 10)",
            "WITH a AS (SELECT * FROM shop.orders) SELECT count(*) FROM a JOIN shop.orders o ON a.id = o.id "
            "WHERE o.id IN (SELECT id FROM a) UNION ALL SELECT count(*) FROM shop.orders",
            "SELECT o.id FROM shop.orders o WHERE o.amount >= (SELECT max(amount) FROM shop.orders "
            "WHERE customer_id = o.customer_id) AND o.id IN (SELECT id FROM shop.orders WHERE paid)",
            "SELECT a.status, count(*) FROM shop.orders a JOIN (SELECT status FROM shop.orders "
            "GROUP BY status) b ON a.status = b.status GROUP BY a.status "
            "HAVING count(*) >= (SELECT min(qty) FROM shop.orders)",
            "SELECT id FROM shop.orders UNION ALL SELECT id FROM shop.orders INTERSECT "
            "SELECT id FROM shop.orders WHERE id > 6",
            "SELECT o.id, (SELECT count(*) FROM shop.orders x WHERE x.customer_id = o.customer_id) n, "
            "(SELECT count(*) FROM shop.orders y WHERE y.status = o.status) m FROM shop.orders o",
        ],
    ),
    (
        "agg",
        [
            "SELECT status, count(*), sum(amount), avg(qty), min(price), max(price) FROM shop.orders "
            "GROUP BY status",
            "SELECT customer_id, paid, count(*) FROM shop.orders GROUP BY customer_id, paid",
            "SELECT status, paid, count(*) FROM shop.orders GROUP BY ROLLUP (status, paid)",
            "SELECT status, paid, count(*), grouping_id() AS g FROM shop.orders GROUP BY CUBE (status, paid)",
            "SELECT status, customer_id, sum(qty) FROM shop.orders GROUP BY GROUPING SETS "
            "((status), (customer_id), ())",
            "SELECT status, grouping(status) AS g, count(*) FROM shop.orders GROUP BY status WITH ROLLUP",
            "SELECT count(*) FILTER (WHERE paid) AS paid_n, sum(amount) FILTER (WHERE status = 'new') AS s "
            "FROM shop.orders",
            "SELECT customer_id, count(*) FROM shop.orders GROUP BY customer_id HAVING count(*) > 1",
            "SELECT customer_id FROM shop.orders GROUP BY customer_id HAVING sum(qty) > 5 AND max(id) > 3",
            "SELECT count(DISTINCT customer_id), approx_count_distinct(status) FROM shop.orders",
            "SELECT stddev_samp(amount), var_pop(qty), corr(amount, qty) FROM shop.orders",
            "SELECT percentile(qty, 0.5), median(qty), percentile_cont(0.25) WITHIN GROUP (ORDER BY qty) "
            "FROM shop.orders",
            "SELECT status, array_join(array_sort(collect_list(note)), ',') AS notes FROM shop.orders "
            "GROUP BY status",
            "SELECT status, size(collect_set(customer_id)) FROM shop.orders GROUP BY status",
            "SELECT bool_and(paid), bool_or(paid), every(qty > 0), some(amount < 0) FROM shop.orders",
            "SELECT max_by(id, amount), min_by(id, amount), count_if(paid) FROM shop.orders",
            "SELECT sum(price), avg(price), sum(price * qty) FROM shop.orders",
            "SELECT 1 AS k, count(*) FROM shop.orders GROUP BY 1",
            "SELECT status, count(*) FROM shop.orders GROUP BY ALL",
            "SELECT date_trunc('DAY', ts) AS d, count(*) FROM shop.orders GROUP BY date_trunc('DAY', ts)",
            "SELECT c.Region, sum(o.amount) FROM shop.orders o JOIN shop.customers c "
            "ON o.customer_id = c.id GROUP BY ROLLUP (c.Region)",
            "SELECT mode(status), any_value(status) IS NOT NULL FROM shop.orders",
            "SELECT histogram_numeric(qty, 3) IS NOT NULL, kurtosis(amount), skewness(amount) FROM shop.orders",
        ],
    ),
    (
        "pivot",
        [
            "SELECT * FROM (SELECT status, paid, amount FROM shop.orders) "
            "PIVOT (sum(amount) FOR status IN ('new', 'shipped', 'refund'))",
            "SELECT * FROM (SELECT customer_id, status, qty FROM shop.orders) "
            "PIVOT (count(*) AS n, sum(qty) AS q FOR status IN ('new' AS fresh, 'shipped' AS sent))",
            "SELECT * FROM (SELECT id, amount, CAST(price AS DOUBLE) AS p FROM shop.orders) "
            "UNPIVOT (val FOR col IN (amount, p))",
            "SELECT * FROM (SELECT id, amount, CAST(price AS DOUBLE) AS p FROM shop.orders) "
            "UNPIVOT INCLUDE NULLS (val FOR col IN (amount AS a, p AS b))",
            "SELECT * FROM shop.orders PIVOT (count(id) FOR paid IN (true, false))",
            "SELECT * FROM (SELECT Region, vip, CreditLimit FROM shop.customers) "
            "PIVOT (max(CreditLimit) FOR Region IN ('EU', 'US', 'APAC'))",
            "SELECT count(*) FROM (SELECT * FROM (SELECT id, amount, qty FROM shop.orders) "
            "UNPIVOT (v FOR c IN (amount, qty)))",
        ],
    ),
    (
        "sample",
        [
            "SELECT count(*) FROM shop.orders TABLESAMPLE (100 PERCENT)",
            "SELECT count(*) FROM shop.orders TABLESAMPLE (0 PERCENT)",
            "SELECT count(*) FROM shop.orders TABLESAMPLE (5 ROWS)",
            "SELECT count(*) FROM shop.orders TABLESAMPLE (100 PERCENT) AS o WHERE o.paid",
            "SELECT * FROM shop.orders TABLESAMPLE (100 PERCENT)",
            "SELECT count(*) FROM shop.orders TABLESAMPLE (50 ROWS)",
            "SELECT (SELECT count(*) FROM shop.orders TABLESAMPLE (3 ROWS)) + "
            "(SELECT count(*) FROM shop.orders TABLESAMPLE (0 PERCENT))",
            "SELECT id FROM (SELECT id FROM shop.orders ORDER BY id LIMIT 6) TABLESAMPLE (4 ROWS)",
        ],
    ),
    (
        "generator",
        [
            "SELECT o.id, tag FROM shop.items o LATERAL VIEW explode(split(tags, ',')) t AS tag",
            "SELECT o.id, pos, tag FROM shop.items o LATERAL VIEW OUTER posexplode(split(tags, ',')) t AS pos, tag",
            "SELECT tag, count(*) FROM shop.items LATERAL VIEW explode(split(tags, ',')) t AS tag GROUP BY tag",
            "SELECT id, explode(sequence(1, CAST(qty AS INT))) AS k FROM shop.orders WHERE qty < 4",
            "SELECT id, array_join(transform(split(tags, ','), x -> upper(x)), '|') FROM shop.items",
            "SELECT id, size(filter(split(tags, ','), x -> x LIKE '%e%')) FROM shop.items",
            "SELECT id, aggregate(sequence(1, CAST(qty AS INT)), 0L, (acc, x) -> acc + x) FROM shop.orders "
            "WHERE qty IS NOT NULL",
            "SELECT id, exists(split(tags, ','), x -> x = 'sale'), forall(split(tags, ','), x -> length(x) > 2) "
            "FROM shop.items",
            "SELECT id, to_json(map_from_arrays(array('a', 'b'), array(id, qty))) FROM shop.orders",
            "SELECT id, array_join(zip_with(array(1, 2), array(id, qty), (a, b) -> a * b), ',') FROM shop.orders",
            "SELECT i.id, t.col FROM shop.items i, LATERAL explode(split(i.tags, ',')) t WHERE i.id < 6",
            "SELECT * FROM shop.items LATERAL VIEW inline(array(struct(1, 'a'), struct(2, 'b'))) t AS n, s "
            "WHERE id < 3",
            "SELECT id, to_json(named_struct('id', id, 'status', status)) FROM shop.orders",
            "SELECT id, reduce(array(1, 2, 3), 0L, (a, x) -> a + x * id) FROM shop.orders",
        ],
    ),
    (
        "expr",
        [
            "SELECT id, CASE status WHEN 'new' THEN 1 WHEN 'shipped' THEN 2 ELSE 0 END AS s FROM shop.orders",
            "SELECT id, CASE WHEN amount IS NULL THEN 'none' WHEN amount < 1 THEN 'small' ELSE 'ok' END "
            "FROM shop.orders",
            "SELECT id, CAST(amount AS DECIMAL(12,3)), CAST(price AS DOUBLE), CAST(qty AS STRING) FROM shop.orders",
            "SELECT id, price * qty, price / 3, price + 0.005, price - CAST(1.1 AS DECIMAL(3,1)) FROM shop.orders",
            "SELECT sum(price * qty), sum(price) / count(*), avg(price * 2) FROM shop.orders",
            "SELECT id, CAST(price AS DECIMAL(38,10)) * CAST(price AS DECIMAL(38,10)) FROM shop.orders",
            "SELECT id, round(amount, 2), bround(price, 1), floor(amount), ceil(price) FROM shop.orders",
            "SELECT id, coalesce(note, status, 'none'), nvl(paid, false), nullif(qty, 1) FROM shop.orders",
            "SELECT id, if(paid, amount, -amount), greatest(qty, 3), least(amount, 50.0) FROM shop.orders",
            "SELECT id, try_cast(note AS INT), CAST(id AS STRING) || '-' || status FROM shop.orders",
            "SELECT id, pmod(id, 3), id % 4, id DIV 3, abs(amount), sign(amount) FROM shop.orders",
            "SELECT id, typeof(price * qty), typeof(price / qty) FROM shop.orders WHERE id = 1",
            "SELECT id, CAST(paid AS INT), CAST(qty > 2 AS STRING), NOT paid FROM shop.orders",
            "SELECT id, hash(id, status), xxhash64(note), md5(CAST(id AS STRING)), sha2(status, 256) "
            "FROM shop.orders",
            "SELECT id, CreditLimit / 7, CreditLimit * SignupScore FROM shop.customers",
            "SELECT id, amount IS DISTINCT FROM price, price = 10.50 FROM shop.orders",
            "SELECT id, CAST(price AS DECIMAL(5,1)), CAST(amount AS BIGINT), CAST(qty AS DOUBLE) / 3 "
            "FROM shop.orders",
            "SELECT '${env:HOME}' AS t, id FROM shop.orders",
        ],
    ),
    (
        "time",
        [
            "SELECT id, to_date(ts), year(ts), month(ts), dayofmonth(ts), hour(ts) FROM shop.orders",
            "SELECT id, date_format(ts, 'yyyy-MM-dd HH:mm'), unix_timestamp(ts) FROM shop.orders",
            "SELECT id, ts + INTERVAL 1 DAY, ts - INTERVAL '2' HOUR FROM shop.orders",
            "SELECT id, datediff(ts, TIMESTAMP '2026-11-01 00:00:00'), date_add(to_date(ts), 3) FROM shop.orders",
            "SELECT id, date_trunc('HOUR', ts), trunc(ts, 'MM'), last_day(ts) FROM shop.orders",
            "SELECT id FROM shop.orders WHERE ts BETWEEN TIMESTAMP '2026-11-02 00:00:00' "
            "AND TIMESTAMP '2026-11-06 00:00:00'",
            "SELECT id, dayofweek(ts), weekofyear(ts), quarter(ts), dayname(ts) FROM shop.orders",
            "SELECT id, timestampdiff(MINUTE, TIMESTAMP '2026-11-01 00:00:00', ts), "
            "timestampadd(HOUR, 5, ts) FROM shop.orders",
            "SELECT id, to_timestamp('2026-11-03 04:05:06'), make_date(2026, 11, CAST(id AS INT)) FROM shop.orders",
            "SELECT min(ts), max(ts), max(ts_period) >= min(ts_period) FROM shop.orders",
            "SELECT id, from_utc_timestamp(ts, 'Europe/Paris'), to_utc_timestamp(ts, 'America/New_York') "
            "FROM shop.orders",
            "SELECT to_date(ts) AS d, count(*) FROM shop.orders GROUP BY to_date(ts)",
            "SELECT id, ts > ts_period - INTERVAL 3650 DAYS FROM shop.orders",
        ],
    ),
    (
        "string",
        [
            "SELECT id, upper(status), lower(note), initcap(note), length(note) FROM shop.orders",
            "SELECT id, concat(status, '/', note), concat_ws('-', status, note, 'x') FROM shop.orders",
            "SELECT id, substr(note, 2, 3), left(note, 2), right(status, 3) FROM shop.orders",
            "SELECT id, trim(note), ltrim('  x'), rtrim(status), lpad(status, 10, '.'), rpad(note, 8, '*') "
            "FROM shop.orders",
            "SELECT id, replace(note, 'o', '0'), regexp_replace(note, '[aeiou]', ''), "
            "regexp_extract(note, '([a-z]+)', 1) FROM shop.orders",
            "SELECT id, instr(note, 'e'), locate('i', note), position('n' IN status) FROM shop.orders",
            "SELECT id, split_part(tags, ',', 1), size(split(tags, ',')), reverse(sku) FROM shop.items",
            "SELECT id, format_string('%s has %d', status, qty), printf('%.2f', amount) FROM shop.orders",
            "SELECT id, startswith(status, 'sh'), endswith(note, 'e'), contains(note, ' ') FROM shop.orders",
            "SELECT Name, soundex(Name), levenshtein(Name, 'Bob'), ascii(Name), char_length(Name) "
            "FROM shop.customers",
            "SELECT id, translate(sku, 'AB', 'ab'), repeat(sku, 2), base64(sku), hex(sku) FROM shop.items",
            "SELECT id, note || '!' AS shout, 'it''s' AS quoted FROM shop.orders WHERE note = 'o''brien'",
            "SELECT id, btrim(note, 'fi'), overlay(status PLACING 'XX' FROM 2 FOR 1) FROM shop.orders",
        ],
    ),
    (
        "link",
        [
            "SELECT count(*) FROM mirror.orders",
            "SELECT * FROM mirror.orders",
            "SELECT count(*) FROM MIRROR.Orders",
            "SELECT m.id, s.id FROM mirror.orders m JOIN shop.orders s ON m.id = s.id",
            "SELECT count(*) FROM mirror.orders WHERE id IN (SELECT id FROM mirror.orders)",
            "SELECT id FROM mirror.orders UNION ALL SELECT id FROM shop.orders",
            "SELECT id FROM mirror.orders EXCEPT SELECT id FROM shop.orders",
            "USE mirror; SELECT count(*) FROM orders",
            "USE mirror; SELECT count(*) FROM orders@shop",
            "USE mirror; SELECT o.id, c.Name FROM orders o JOIN clients c ON o.customer_id = c.id",
            "USE mirror; SELECT id FROM orders@shop WHERE id IN (SELECT id FROM orders WHERE paid)",
            "USE mirror; SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM orders@shop) AS n",
            "USE mirror; WITH c AS (SELECT id FROM orders@shop) SELECT count(*) FROM c JOIN orders USING (id)",
            "USE mirror; SELECT Name FROM customers@shop WHERE Region = 'EU'",
            "USE mirror; SELECT count(*) FROM orders@shop o JOIN mirror.orders m ON o.id = m.id "
            "JOIN shop.orders s ON s.id = m.id",
            "SELECT count(*), sum(weight) FROM sales.shop_items",
            "USE sales; SELECT i.sku, o.id FROM items@shop i JOIN orders o ON o.customer_id = i.order_id",
            "USE sales; SELECT count(*) FROM shop_items WHERE order_id IN (SELECT id FROM shop.orders)",
            "SELECT c.Name, count(*) FROM mirror.clients c JOIN mirror.orders o ON o.customer_id = c.id "
            "GROUP BY c.Name",
            "SELECT mirror.orders.id FROM mirror.orders WHERE mirror.orders.paid",
            "USE mirror; SELECT orders.id FROM orders WHERE orders.qty > 5",
        ],
    ),
    (
        "version",
        [
            "SELECT count(*) FROM shop.orders VERSION AS OF 1",
            "SELECT count(*) FROM shop.orders VERSION AS OF 2",
            "SELECT * FROM shop.orders VERSION AS OF 3",
            "SELECT (SELECT count(*) FROM shop.orders VERSION AS OF 1), (SELECT count(*) FROM shop.orders "
            "VERSION AS OF 2), (SELECT count(*) FROM shop.orders VERSION AS OF 3), (SELECT count(*) FROM shop.orders)",
            "SELECT id FROM shop.orders WHERE id NOT IN (SELECT id FROM shop.orders VERSION AS OF 2)",
            "SELECT id FROM shop.orders EXCEPT SELECT id FROM shop.orders VERSION AS OF 1",
            "SELECT a.id, b.amount FROM shop.orders VERSION AS OF 3 a JOIN shop.orders VERSION AS OF 2 b "
            "ON a.id = b.id",
            "WITH old AS (SELECT * FROM shop.orders VERSION AS OF 1) SELECT count(*) FROM old "
            "JOIN shop.orders USING (id)",
            "SELECT count(*) FROM shop.customers VERSION AS OF 1",
            "SELECT count(*) FROM mirror.orders VERSION AS OF 2",
            "SELECT id FROM shop.orders VERSION AS OF 2 WHERE id IN (SELECT id FROM shop.orders VERSION AS OF 1)",
            "SELECT count(*) FROM SHOP.ORDERS VERSION AS OF 1",
            "SELECT count(*) FROM shop.orders TIMESTAMP AS OF '2999-01-01T00:00:00Z'",
            "USE mirror; SELECT count(*) FROM orders VERSION AS OF 3",
        ],
    ),
    (
        "federation",
        [
            "SELECT (SELECT count(*) FROM shop.orders), (SELECT count(*) FROM sales.orders), "
            "(SELECT count(*) FROM sales_eu.orders)",
            "SELECT count(*) FROM shop.orders s JOIN sales.orders o ON s.id = o.id",
            "SELECT count(*) FROM shop.orders s JOIN sales.orders o ON s.customer_id = o.customer_id",
            "SELECT s.id, o.id, e.id FROM shop.orders s JOIN sales.orders o ON s.customer_id = o.customer_id "
            "JOIN sales_eu.orders e ON e.customer_id = o.customer_id",
            "SELECT * FROM sales.orders",
            "SELECT * FROM sales_eu.orders",
            "SELECT o.id, c.Name FROM sales.orders o LEFT JOIN shop.customers c ON c.id = o.customer_id",
            "SELECT customer_id, count(*) FROM (SELECT customer_id FROM shop.orders UNION ALL "
            "SELECT customer_id FROM sales.orders UNION ALL SELECT customer_id FROM sales_eu.orders) "
            "GROUP BY customer_id",
            "SELECT id FROM sales.orders WHERE customer_id IN (SELECT customer_id FROM sales_eu.orders)",
            "SELECT id FROM shop.orders WHERE customer_id NOT IN (SELECT customer_id FROM sales.orders "
            "WHERE customer_id IS NOT NULL)",
            "SELECT sum(amount) FROM shop.orders UNION ALL SELECT sum(amount) FROM sales.orders "
            "UNION ALL SELECT sum(amount) FROM sales_eu.orders",
            "SELECT SALES.Orders.id FROM SALES.Orders JOIN Sales_EU.orders ON "
            "SALES.Orders.customer_id = Sales_EU.orders.customer_id",
            "SELECT (SELECT count(*) FROM sales.shop_items) = (SELECT count(*) FROM shop.items)",
            "SELECT count(*) FROM shop.orders VERSION AS OF 1 JOIN sales.orders USING (customer_id)",
        ],
    ),
    (
        "use",
        [
            "USE shop; SELECT count(*) FROM orders",
            "USE shop; SELECT o.id, c.Name FROM orders o JOIN customers c ON o.customer_id = c.id",
            "USE shop; SELECT count(*) FROM orders JOIN sales.orders s USING (id)",
            "USE sales; SELECT * FROM orders",
            "USE sales_eu; SELECT id FROM orders UNION ALL SELECT id FROM shop.orders",
            "USE SHOP; SELECT count(*) FROM Orders",
            "USE shop; WITH x AS (SELECT * FROM orders) SELECT count(*) FROM x WHERE id IN (SELECT id FROM orders)",
            "USE sales; SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM shop.orders), "
            "(SELECT count(*) FROM sales_eu.orders)",
            "USE shop; SELECT count(*) FROM orders VERSION AS OF 2",
        ],
    ),
    (
        "misc",
        [
            "SELECT * FROM range(3)",
            "SELECT r.id, o.status FROM range(1, 4) r JOIN shop.orders o ON o.id = r.id",
            "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS v(k, s) JOIN shop.orders o ON o.id = v.k",
            "SELECT id, note FROM shop.orders ORDER BY note NULLS FIRST, id",
            (
                "SELECT id, amount FROM shop.orders ORDER BY amount DESC NULLS FIRST, id LIMIT 4",
                {"ordered": True},
            ),
            "SELECT id FROM shop.orders WHERE id = 3 OR (id > 10 AND paid)",
            "SELECT id FROM shop.orders DISTRIBUTE BY customer_id SORT BY id",
            "SELECT * FROM shop.orders CLUSTER BY id",
            "SELECT id FROM shop.orders WHERE status = 'nothing'",
            "SELECT struct(id, status).status AS s FROM shop.orders",
            "SELECT id, array(id, qty)[1] AS q, map('k', status)['k'] AS m FROM shop.orders",
            "SELECT count(*) FROM shop.orders WHERE amount = amount",
            "SELECT id FROM shop.orders o WHERE o.id IN (1, 2, 3) AND o.customer_id IS NOT NULL",
            "SELECT id, qty FROM (SELECT /*+ REPARTITION(3) */ * FROM shop.orders) WHERE qty > 1",
            ("SELECT id FROM shop.orders ORDER BY id DESC", {"ordered": True}),
            "SELECT count(*) FROM shop.orders WHERE note = ''",
        ],
    ),
]


def _cases() -> list[Case]:
    out: list[Case] = []
    for prefix, statements in _GROUPS:
        for n, entry in enumerate(statements, start=1):
            sql, options = (entry, _Options()) if isinstance(entry, str) else entry
            out.append(Case(f"{prefix}-{n:02d}", sql, **options))
    return out


CASES: list[Case] = _cases()
# Statements streampart still answers wrongly or refuses (found by the harness): id → why.
# (join-21 and join-22, a join hint naming an alias, were refused by the early check until it
# skipped hints' arguments.)
KNOWN_FAILURES: dict[str, str] = {}
