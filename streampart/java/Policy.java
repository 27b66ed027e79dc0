package streampart.sqlserver;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry$;
import org.apache.spark.sql.catalyst.analysis.SimpleFunctionRegistry;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.expressions.UserDefinedExpression;
import org.apache.spark.sql.catalyst.plans.logical.DeserializeToObject;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MapInArrow;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.datasources.LogicalRelation;

import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * What an analyzed statement may hold, decided on what Spark resolved (never on how it was
 * spelled): plan nodes from {@link #PLANS}; expressions that are Spark's built-in functions (but
 * for those that reach outside the query: {@link #REFUSED}) or Spark's own syntax (operators,
 * casts, subqueries, lambdas — classes of Spark's expression package that no function name
 * reaches); and data only from the statement's staged snapshots.
 */
public final class Policy extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    private static final String BY_NAME = "calls Java methods by name (as reflect, java_method and try_reflect do)";
    private static final String FETCHES = "parses XML with a parser that loads the documents a DOCTYPE names (any "
        + "address, any file on the server)";
    private static final String PATHS = "shows where the server keeps the table's files";

    /** Built-in functions a query may not call, and why: each reaches outside the query's snapshots. */
    static final Map<String, String> REFUSED = Map.ofEntries(
        Map.entry("reflect", BY_NAME), Map.entry("java_method", BY_NAME), Map.entry("try_reflect", BY_NAME),
        Map.entry("xpath", FETCHES), Map.entry("xpath_boolean", FETCHES), Map.entry("xpath_double", FETCHES),
        Map.entry("xpath_float", FETCHES), Map.entry("xpath_int", FETCHES), Map.entry("xpath_long", FETCHES),
        Map.entry("xpath_number", FETCHES), Map.entry("xpath_short", FETCHES), Map.entry("xpath_string", FETCHES));

    /**
     * Built-in functions a SQL server's client may not call, and why: they show what the server's
     * user sees (a local `streampart query` runs as the user who can read the files anyway).
     */
    static final Map<String, String> REFUSED_TO_CLIENTS = Map.of(
        "input_file_name", PATHS, "input_file_block_start", PATHS, "input_file_block_length", PATHS);

    /** Spark's XPath evaluation, however a plan reaches it. */
    private static final String XPATH_CLASSES = "org.apache.spark.sql.catalyst.expressions.xml.XPath";

    /** The logical plan nodes a query may hold once analysed (simple class names). */
    static final Set<String> PLANS = Set.of(
        "Project", "Filter", "Aggregate", "Join", "LateralJoin", "AsOfJoin", "Union", "Intersect", "Except",
        "Sort", "GlobalLimit", "LocalLimit", "Offset", "Tail", "Window", "WindowGroupLimit", "SubqueryAlias",
        "Distinct", "Deduplicate", "Sample", "Generate", "Expand", "Pivot", "WithCTE", "CTERelationDef",
        "CTERelationRef", "UnionLoop", "UnionLoopRef", "Repartition", "RepartitionByExpression",
        "RebalancePartitions", "ResolvedHint", "OneRowRelation", "LocalRelation", "Range", "EmptyRelation",
        "LogicalRelation", "LogicalRDD", "Subquery");

    private static final String EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions.";

    private static volatile Map<String, String> builtins; // class name → function name
    private static volatile Map<String, String> refusedClasses; // class name → why
    private static volatile Map<String, String> refusedToClients; // class name → why

    private final org.apache.spark.sql.SparkSession session;

    Policy(org.apache.spark.sql.SparkSession session) {
        this.session = session;
    }

    /**
     * Check {@code plan}, analysed in this rule's session. A plan with no staged statement is the
     * driver's own (a snapshot frame, Spark's work) in its own sessions. In a SQL server's client
     * session nothing is analysed but the statements the gate read and staged, and what Spark
     * plans again while running them (a subquery prepared for execution): a plan with no staged
     * statement there must hold only what a query may, and read only the snapshots of the
     * session's recent statements; an encoder's (which reads nothing) passes as it is.
     */
    @Override
    public BoxedUnit apply(LogicalPlan plan) {
        Statements.Context ctx = Statements.current(session);
        if (ctx == null) {
            if (!Hooks.isClient(session) || encoderOnly(plan)) {
                return BoxedUnit.UNIT;
            }
            String why = refusal(plan, Statements.recent(session));
            if (why != null) {
                throw Extensions.<RuntimeException>sneaky(new Extensions.Refused(why));
            }
            return BoxedUnit.UNIT;
        }
        Statements.finish();
        String why = refusal(plan, ctx);
        if (why != null) {
            throw Extensions.<RuntimeException>sneaky(new Extensions.Refused(why));
        }
        Statements.checked(ctx);
        return BoxedUnit.UNIT;
    }

    /**
     * Whether {@code plan} is what Spark analyses to turn a result's rows into objects (an
     * encoder's deserializer over an empty relation of the result's columns): it reads nothing
     * and runs nothing, and comes after the statement's own analysis, when its rows are collected.
     */
    static boolean encoderOnly(LogicalPlan plan) {
        return plan instanceof DeserializeToObject d && d.child() instanceof LocalRelation r && r.data().isEmpty();
    }

    /**
     * The data source a node reads (a file relation, an RDD; for a table in a bucket, the Python
     * function its snapshot's files are read with: streampart/bucket_reads.py), or null for any
     * other node.
     */
    static Object source(LogicalPlan p) {
        if (p instanceof LogicalRelation r) {
            return r.relation();
        }
        if (p instanceof LogicalRDD r) {
            return r.rdd();
        }
        if (p instanceof MapInArrow m && m.functionExpr() instanceof PythonUDF udf) {
            return udf.func();
        }
        return null;
    }

    static String refusal(LogicalPlan plan, Statements.Context ctx) {
        String[] found = new String[1];
        visit(plan, ctx, found);
        return found[0];
    }

    private static void visit(LogicalPlan plan, Statements.Context ctx, String[] found) {
        if (found[0] != null) {
            return;
        }
        String kind = plan.getClass().getSimpleName();
        Object source = source(plan);
        // a staged snapshot's read of a bucket's files: no SQL text makes one, and its function is ours
        boolean bucketRead = plan instanceof MapInArrow && source != null && ctx.sources.contains(source);
        if (!PLANS.contains(kind) && !bucketRead) {
            found[0] = kind + " in a query: queries read streampart tables (SELECT, WITH …) and nothing else";
            return;
        }
        if (source != null && !ctx.sources.contains(source)) {
            found[0] = "the statement reads data outside the streampart tables it names: queries read streampart "
                + "tables (NAMESPACE.TABLE) only, not files or Spark's catalog";
            return;
        }
        if (!bucketRead) {
            for (Expression e : CollectionConverters.asJava(plan.expressions())) {
                visit(e, ctx, found);
            }
        }
        for (Object inner : CollectionConverters.asJava(plan.innerChildren())) {
            if (inner instanceof LogicalPlan p && !bucketRead) {
                visit(p, ctx, found);
            }
        }
        for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
            visit(child, ctx, found);
        }
    }

    private static void visit(Expression e, Statements.Context ctx, String[] found) {
        if (found[0] != null) {
            return;
        }
        String why = refusal(e);
        if (why == null && ctx.client) {
            String function = refusedToClients.get(e.getClass().getName());
            why = function == null ? null : "function " + e.prettyName() + "() " + function + "; queries may not use it";
        }
        if (why != null) {
            found[0] = why;
            return;
        }
        if (e instanceof SubqueryExpression sub) {
            visit(sub.plan(), ctx, found);
        }
        for (Expression child : CollectionConverters.asJava(e.children())) {
            visit(child, ctx, found);
        }
    }

    /** Why expression {@code e} (alone, not its children) may not run, or null. */
    static String refusal(Expression e) {
        load();
        String cls = e.getClass().getName();
        String function = builtins.get(cls);
        String why = refusedClasses.get(cls);
        if (why == null && cls.startsWith(XPATH_CLASSES)) {
            why = FETCHES;
        }
        if (why == null && e instanceof org.apache.spark.sql.catalyst.expressions.objects.InvokeLike) {
            for (Expression child : CollectionConverters.asJava(e.children())) {
                if (child instanceof org.apache.spark.sql.catalyst.expressions.Literal lit && lit.value() != null
                        && lit.value().getClass().getName().startsWith(XPATH_CLASSES)) {
                    why = FETCHES;
                }
            }
        }
        if (why != null) {
            return "function " + e.prettyName() + "() " + why + "; queries may not use it";
        }
        if (e instanceof UserDefinedExpression) {
            return "function " + e.prettyName() + "() is not one of Spark's built-in functions; queries may use "
                + "built-in functions only";
        }
        if (function != null || cls.startsWith(EXPRESSIONS)) {
            return null;
        }
        return "function " + e.prettyName() + "() is not one of Spark's built-in functions; queries may use "
            + "built-in functions only";
    }

    private static void load() {
        if (builtins != null) {
            return;
        }
        synchronized (Policy.class) {
            if (builtins != null) {
                return;
            }
            SimpleFunctionRegistry registry = FunctionRegistry$.MODULE$.builtin();
            Map<String, String> byClass = new HashMap<>();
            Map<String, String> refused = new HashMap<>();
            Map<String, String> clients = new HashMap<>();
            List<FunctionIdentifier> names = CollectionConverters.asJava(registry.listFunction());
            for (FunctionIdentifier name : names) {
                scala.Option<ExpressionInfo> info = registry.lookupFunction(name);
                if (info.isEmpty() || info.get().getClassName() == null) {
                    continue;
                }
                String cls = info.get().getClassName();
                if (REFUSED_TO_CLIENTS.containsKey(name.funcName())) {
                    clients.put(cls, REFUSED_TO_CLIENTS.get(name.funcName()));
                }
                if (REFUSED.containsKey(name.funcName())) {
                    refused.put(cls, REFUSED.get(name.funcName()));
                    byClass.put(cls, name.funcName());
                } else {
                    byClass.putIfAbsent(cls, name.funcName());
                }
            }
            // reflect's class is java_method's too, and try_reflect's replacement
            refused.put("org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection", BY_NAME);
            refusedToClients = clients;
            refusedClasses = refused;
            builtins = byClass;
        }
    }
}
