package streampart.sqlserver;

import org.apache.hive.service.cli.HiveSQLException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.NamedParameterContext;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.PositionalParameterContext;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * spark.sql.extensions of every streampart SparkSession: {@link Statements.Resolve} puts each
 * staged statement's pinned snapshots where its table names stand, and {@link Policy} checks what
 * that statement resolved to. On the SQL server, every statement of a client session is read by
 * Spark's parser ({@link Reading}) and sent, as read, to the Python driver, which authorises it
 * and pins and stages the snapshots it reads; Spark then analyses and runs that same plan. Other
 * sessions parse as Spark does.
 */
public final class Extensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectParser(new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
            @Override
            public ParserInterface apply(SparkSession spark, ParserInterface delegate) {
                return new Parser(spark, delegate);
            }
        });
        extensions.injectResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession spark) {
                return new Statements.Resolve(spark);
            }
        });
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, scala.Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public scala.Function1<LogicalPlan, BoxedUnit> apply(SparkSession spark) {
                return new Policy(spark);
            }
        });
        return BoxedUnit.UNIT;
    }

    static final class Parser implements ParserInterface {
        private final SparkSession spark;
        private final ParserInterface delegate;

        Parser(SparkSession spark, ParserInterface delegate) {
            this.spark = spark;
            this.delegate = delegate;
            // a client session's state is built while the Thrift server opens it, on the thread of
            // the connection that just logged in
            Hooks.remember(spark, Auth.loggedIn());
        }

        /**
         * A client session's statement: read by Spark's own lexer and parser ({@link Reading}),
         * decided by the Python driver on that reading (who may read what; the snapshots staged),
         * and run as that very plan. Every other session parses as Spark does.
         */
        @Override
        public LogicalPlan parsePlan(String sql) throws ParseException {
            if (!Hooks.isClient(spark)) {
                return delegate.parsePlan(sql);
            }
            Statements.finish();
            String[] client = Hooks.clientOf(spark);
            Bridge b = Hooks.bridge();
            if (client == null || b == null) {
                throw Extensions.<RuntimeException>sneaky(new Refused("this session is not bound to a login: reconnect"));
            }
            Reading reading = Reading.of(delegate, sql);
            String[] args = reading.kind == Reading.Kind.QUERY ? reading.refs() : reading.name.toArray(new String[0]);
            String answer = b.decide(client, reading.kind.name().toLowerCase(java.util.Locale.ROOT), reading.used, args, spark);
            if (answer == null || !answer.startsWith("OK:")) {
                throw Extensions.<RuntimeException>sneaky(new Refused(answer == null ? "the SQL server could not check the statement" : answer.substring(4)));
            }
            // "OK:<staged statement id>:<text>": a query runs as read; a listing runs the driver's text
            int colon = answer.indexOf(':', 3);
            String id = answer.substring(3, colon);
            LogicalPlan plan = reading.plan;
            if (reading.kind != Reading.Kind.QUERY) {
                try {
                    plan = delegate.parsePlan(answer.substring(colon + 1));
                } catch (ParseException e) {
                    Statements.discard(id);
                    throw Extensions.<RuntimeException>sneaky(new Refused(firstLine(e.getMessage())));
                }
            }
            Statements.activate(id, spark);
            return plan;
        }

        @Override
        public LogicalPlan parsePlanWithParameters(String sql, ParameterContext parameters) throws ParseException {
            if (!Hooks.isClient(spark)) {
                return delegate.parsePlanWithParameters(sql, parameters);
            }
            boolean none = parameters instanceof PositionalParameterContext p && p.params().isEmpty()
                || parameters instanceof NamedParameterContext n && n.params().isEmpty();
            if (!none) {
                throw Extensions.<RuntimeException>sneaky(new Refused("statements take no parameters here: write the values in the statement"));
            }
            return parsePlan(sql);
        }

        @Override
        public Expression parseExpression(String sql) throws ParseException {
            return delegate.parseExpression(sql);
        }

        @Override
        public TableIdentifier parseTableIdentifier(String sql) throws ParseException {
            return delegate.parseTableIdentifier(sql);
        }

        @Override
        public FunctionIdentifier parseFunctionIdentifier(String sql) throws ParseException {
            return delegate.parseFunctionIdentifier(sql);
        }

        @Override
        public scala.collection.immutable.Seq<String> parseMultipartIdentifier(String sql)
                throws ParseException {
            return delegate.parseMultipartIdentifier(sql);
        }

        @Override
        public LogicalPlan parseQuery(String sql) throws ParseException {
            if (Hooks.isClient(spark)) { // a view's text, say: no client statement is parsed but by parsePlan
                throw Extensions.<RuntimeException>sneaky(new Refused("the SQL server runs only the statements it has checked"));
            }
            return delegate.parseQuery(sql);
        }

        @Override
        public StructType parseRoutineParam(String sql) throws ParseException {
            return delegate.parseRoutineParam(sql);
        }

        @Override
        public StructType parseTableSchema(String sql) throws ParseException {
            return delegate.parseTableSchema(sql);
        }

        @Override
        public DataType parseDataType(String sql) throws ParseException {
            return delegate.parseDataType(sql);
        }
    }

    /**
     * A refused statement: the client's error, with its one-line reason and no server stack (a
     * syntax error: its line, then the client's line with a caret under where, {@link #syntax}).
     */
    static final class Refused extends HiveSQLException {
        Refused(String why) {
            this(why, "42000");
        }

        Refused(String why, String sqlState) {
            this(firstLine(why), sqlState, true);
        }

        private Refused(String message, String sqlState, boolean asIs) {
            super(message, sqlState);
        }

        /** A syntax error: {@code what} (one line), and {@code picture} ({@link Reading#picture}) after it. */
        static Refused syntax(String what, String picture, String sqlState) {
            return new Refused(firstLine(what) + picture, sqlState, true);
        }

        /** The same refusal, made afresh (Spark may have set a stack on this one). */
        Refused copy() {
            return new Refused(getMessage(), getSQLState(), true);
        }

        /**
         * The message alone: Thrift's answer to an operation's status is the exception printed as
         * a stack trace, whose first line is this — without it, the client reads the class's name.
         */
        @Override
        public String toString() {
            return getMessage();
        }

        @Override
        public synchronized Throwable fillInStackTrace() {
            return this;
        }

        @Override
        public void setStackTrace(StackTraceElement[] trace) {
            // Spark sets the caller's stack on errors of lazy analysis: a client never sees one
        }
    }

    /** The first line of {@code text}, without Spark's SQLSTATE suffix: what a client is told. */
    static String firstLine(String text) {
        if (text == null || text.isBlank()) {
            return "the statement failed";
        }
        String line = text.strip().lines().findFirst().orElse("").strip();
        return line.replaceAll("\\s*SQLSTATE: \\w+;?", "").strip();
    }

    @SuppressWarnings("unchecked")
    static <E extends Throwable> E sneaky(Throwable e) throws E {
        throw (E) e;
    }
}
