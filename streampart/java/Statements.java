package streampart.sqlserver;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.sql.catalyst.AliasIdentifier;
import org.apache.spark.sql.catalyst.analysis.RelationTimeTravel;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.CreateTableAsSelect;
import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedWith;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.datasources.LogicalRelation;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * One statement's tables, resolved by Spark's own analyzer.
 *
 * <p>The Python driver pins the snapshot of every table a statement names and stages each as an
 * analyzed plan under the name as written ({@link #put}); while Spark analyses that statement on
 * this thread, {@link Resolve} (a resolution rule, after Spark's CTE substitution) puts the staged
 * plan where the name stands, qualified as the table, and {@link Policy} (a check rule) refuses the
 * analyzed plan if it holds anything but allowed plan nodes, allowed functions and the staged
 * snapshots' files. Names are matched without regard to case, as Spark matches them.
 *
 * <p>A staged statement belongs to the session it was staged for and to the thread that analyses
 * it. Plans of the driver's own sessions with none — Spark's own work, the snapshot frames — are
 * neither rewritten nor checked; in a SQL server's client session a plan with none is refused
 * ({@link Policy}).
 */
public final class Statements {
    /** What one statement may read: each name's snapshot plan, and the data sources those hold. */
    public static final class Context {
        final Map<String, LogicalPlan> plans = new HashMap<>();
        final Set<Object> sources = Collections.newSetFromMap(new IdentityHashMap<>());
        Object owner; // the SparkSession whose statement this is: no other session's analysis uses it
        boolean client; // whether that is a SQL server client's session (Policy refuses it more)
    }

    private static final ThreadLocal<Context> CURRENT = new ThreadLocal<>();
    private static final Map<String, Context> STAGED = new ConcurrentHashMap<>();
    private static final AtomicLong SERIAL = new AtomicLong();

    private Statements() {}

    /** A new statement's id, to {@link #put} its tables under. */
    public static String open() {
        String id = "s" + SERIAL.incrementAndGet();
        STAGED.put(id, new Context());
        return id;
    }

    /** Forget a statement staged but never run (its check failed in the driver, say). */
    public static void discard(String id) {
        STAGED.remove(id);
    }

    /**
     * Stage the snapshot {@code plan} (analyzed) of the table written {@code key} ({@link #key}):
     * it is read as {@code namespace.name}, so {@code name.column} and {@code ns.name.column}
     * resolve as for a catalog table.
     */
    public static void put(String id, String key, String namespace, String name, LogicalPlan plan) {
        Context ctx = STAGED.get(id);
        if (ctx == null) {
            throw new IllegalStateException("no statement " + id);
        }
        List<String> qualifier = new ArrayList<>();
        qualifier.add(namespace);
        AliasIdentifier alias = new AliasIdentifier(name, CollectionConverters.asScala(qualifier).toList());
        ctx.plans.put(key, new SubqueryAlias(alias, plan));
        plan.foreach(new scala.runtime.AbstractFunction1<LogicalPlan, scala.runtime.BoxedUnit>() {
            @Override
            public scala.runtime.BoxedUnit apply(LogicalPlan p) {
                Object source = Policy.source(p);
                if (source != null) {
                    ctx.sources.add(source);
                }
                return scala.runtime.BoxedUnit.UNIT;
            }
        });
    }

    /** Make staged statement {@code id} the one this thread analyses next, in session {@code owner}. */
    public static void activate(String id, Object owner) {
        Context ctx = id == null ? null : STAGED.remove(id);
        if (ctx == null) {
            CURRENT.remove();
        } else {
            ctx.owner = owner;
            ctx.client = owner instanceof org.apache.spark.sql.SparkSession spark && Hooks.isClient(spark);
            CURRENT.set(ctx);
        }
    }

    /** The statement this thread analyses in {@code session}, or null (none, or another session's). */
    static Context current(Object session) {
        Context ctx = CURRENT.get();
        return ctx != null && ctx.owner == session ? ctx : null;
    }

    static void finish() {
        CURRENT.remove();
    }

    // Why 8: the statements of one session whose plans may still be analysed again after their
    // own check (a subquery prepared for execution, on the statement's thread or another): a
    // session runs a few statements at once at most, each re-planned while it runs.
    private static final int RECENT = 8;

    private static final Map<Object, java.util.ArrayDeque<Context>> CHECKED =
        Collections.synchronizedMap(new java.util.WeakHashMap<>());

    /** Remember {@code ctx}, just checked, as one of its session's statements in flight. */
    static void checked(Context ctx) {
        if (ctx.owner == null) {
            return;
        }
        synchronized (CHECKED) {
            java.util.ArrayDeque<Context> recent = CHECKED.computeIfAbsent(ctx.owner, k -> new java.util.ArrayDeque<>());
            recent.addLast(ctx);
            while (recent.size() > RECENT) {
                recent.removeFirst();
            }
        }
    }

    /**
     * What a plan analysed again in {@code session} after its statement's check may read: the
     * snapshots of the session's recent statements (an empty context when there are none).
     */
    static Context recent(Object session) {
        Context all = new Context();
        all.owner = session;
        all.client = true; // asked only for a client's session
        synchronized (CHECKED) {
            java.util.ArrayDeque<Context> recent = CHECKED.get(session);
            if (recent != null) {
                for (Context ctx : recent) {
                    all.sources.addAll(ctx.sources);
                }
            }
        }
        return all;
    }

    /**
     * The query of statement {@code sql} analysed (and checked) in {@code session} over the tables
     * staged as {@code id}: for {@code INSERT INTO … query} and {@code CREATE TABLE … AS query}, the
     * query's rows. The statement itself never runs here; its caller commits the rows.
     */
    public static Object analyze(Object session, String sql, String id) throws Exception {
        org.apache.spark.sql.classic.SparkSession spark = (org.apache.spark.sql.classic.SparkSession) session;
        LogicalPlan parsed = queryOf(spark.sessionState().sqlParser().parsePlan(sql));
        activate(id, session);
        try {
            return org.apache.spark.sql.classic.Dataset.ofRows(spark, parsed);
        } finally {
            finish();
        }
    }

    /** The query a writing statement runs (with the WITH clause written before INSERT), else the plan. */
    static LogicalPlan queryOf(LogicalPlan plan) {
        if (plan instanceof InsertIntoStatement insert) {
            return insert.query();
        }
        if (plan instanceof CreateTableAsSelect ctas) {
            return ctas.query();
        }
        if (plan instanceof UnresolvedWith with && with.child() instanceof InsertIntoStatement insert) {
            return with.copy(insert.query(), with.cteRelations(), with.allowRecursion());
        }
        return plan;
    }

    /** How a table reference is staged: its name parts as written, any case, and the version read. */
    public static String key(List<String> parts, String version, String timestamp) {
        StringBuilder out = new StringBuilder();
        for (String part : parts) {
            if (out.length() > 0) {
                out.append('\u0001');
            }
            out.append(part.toLowerCase(Locale.ROOT));
        }
        if (version != null) {
            out.append("\u0002v").append(version);
        } else if (timestamp != null) {
            out.append("\u0002t").append(timestamp);
        }
        return out.toString();
    }

    static String written(List<String> parts) {
        return String.join(".", parts);
    }

    /** The resolution rule: each staged name becomes its snapshot; a name not staged is refused. */
    public static final class Resolve extends Rule<LogicalPlan> {
        private final Object session;

        Resolve(Object session) {
            this.session = session;
        }

        @Override
        public LogicalPlan apply(LogicalPlan plan) {
            Context ctx = current(session);
            if (ctx == null) {
                return plan;
            }
            return plan.resolveOperatorsUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
                @Override
                public boolean isDefinedAt(LogicalPlan p) {
                    return p instanceof UnresolvedRelation
                        || (p instanceof RelationTimeTravel rt && rt.relation() instanceof UnresolvedRelation);
                }

                @Override
                public LogicalPlan apply(LogicalPlan p) {
                    List<String> parts;
                    String version = null;
                    String timestamp = null;
                    if (p instanceof RelationTimeTravel rt) {
                        parts = CollectionConverters.asJava(((UnresolvedRelation) rt.relation()).multipartIdentifier());
                        version = rt.version().isDefined() ? rt.version().get() : null;
                        Option<Expression> ts = rt.timestamp();
                        if (ts.isDefined()) {
                            timestamp = Reading.timestampKey(ts.get());
                        }
                    } else {
                        parts = CollectionConverters.asJava(((UnresolvedRelation) p).multipartIdentifier());
                    }
                    LogicalPlan staged = ctx.plans.get(key(parts, version, timestamp));
                    if (staged == null) {
                        throw Extensions.<RuntimeException>sneaky(new Extensions.Refused(
                            "table " + written(parts) + ": queries read streampart tables named NAMESPACE.TABLE "
                                + "(or, inside a namespace, TABLE and TABLE@SOURCE), written directly in the statement"));
                    }
                    return staged;
                }
            });
        }
    }
}
