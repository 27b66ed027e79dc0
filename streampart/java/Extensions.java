package streampart.sqlserver;

import org.apache.hive.service.cli.HiveSQLException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParseException;
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
 * that statement resolved to. On the SQL server, every statement of a client session goes to the
 * Python driver first, which checks and authorises it, pins and stages the snapshots it reads and
 * answers the statement Spark parses (and analyses over those snapshots) instead. Other sessions
 * parse as Spark does.
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
                return new Statements.Resolve();
            }
        });
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, scala.Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public scala.Function1<LogicalPlan, BoxedUnit> apply(SparkSession spark) {
                return new Policy();
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

        @Override
        public LogicalPlan parsePlan(String sql) throws ParseException {
            String[] client = Hooks.clientOf(spark);
            Bridge b = Hooks.bridge();
            if (client == null || b == null) {
                return delegate.parsePlan(sql);
            }
            Statements.finish();
            String answer = b.rewrite(client, sql, spark);
            if (answer != null && answer.startsWith("OK:")) {
                // "OK:<staged statement id>:<text>"; no id: the text reads no table
                int colon = answer.indexOf(':', 3);
                String id = answer.substring(3, colon);
                LogicalPlan plan;
                try {
                    plan = delegate.parsePlan(answer.substring(colon + 1));
                } catch (ParseException e) {
                    Statements.discard(id);
                    // Spark's picture of where (the statement, a caret), without the server's stack
                    throw Extensions.<RuntimeException>sneaky(new Refused(e.getMessage().strip()));
                }
                Statements.activate(id.isEmpty() ? null : id);
                return plan;
            }
            String why = answer == null ? "the SQL server could not check the statement" : answer.substring(4);
            throw Extensions.<RuntimeException>sneaky(new Refused(why));
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

    /** A refused statement: the client's error, with its one-line reason and no server stack. */
    static final class Refused extends HiveSQLException {
        Refused(String why) {
            super(why, "42000");
        }

        @Override
        public synchronized Throwable fillInStackTrace() {
            return this;
        }
    }

    @SuppressWarnings("unchecked")
    static <E extends Throwable> E sneaky(Throwable e) throws E {
        throw (E) e;
    }
}
