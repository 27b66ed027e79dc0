package streampart.sqlserver;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import javax.security.auth.login.LoginException;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hive.service.auth.HiveAuthFactory;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.FetchOrientation;
import org.apache.hive.service.cli.FetchType;
import org.apache.hive.service.cli.GetInfoType;
import org.apache.hive.service.cli.GetInfoValue;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.OperationHandle;
import org.apache.hive.service.cli.OperationStatus;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.rpc.thrift.TOperationHandle;
import org.apache.hive.service.rpc.thrift.TProtocolVersion;
import org.apache.hive.service.rpc.thrift.TRowSet;
import org.apache.hive.service.rpc.thrift.TTableSchema;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Every Thrift call of a client, on its way to Spark's CLI service: the Thrift server's one door.
 *
 * <p>It stands where the Thrift service calls its CLI service ({@link Hooks#install} puts it
 * there), so no call reaches a session but through it:
 * <ul>
 *   <li>OpenSession: a client's connection settings never reach Spark. The session opens with
 *       none; {@code use:database} is then checked as {@code USE} is, in the session bound to its
 *       login; the fetch size the Hive JDBC driver always sends is dropped (every fetch names its
 *       own row count); any other setting is refused, naming it, and nothing is opened.</li>
 *   <li>ExecuteStatement: per-statement settings (a {@code confOverlay}) are refused; the
 *       statement itself is read and decided by the parser hook ({@link Extensions.Parser}).</li>
 *   <li>Metadata calls (GetTables, GetColumns, …) list Spark's own session catalog, which holds no
 *       streampart table and which no client can change; they answer only sessions whose token is
 *       still valid. Delegation tokens and impersonation are refused.</li>
 *   <li>Every error a client is told is one line, without the server's stack or a plan (a syntax
 *       error: that line, then the client's line with a caret under where, {@link Reading#picture}).</li>
 * </ul>
 */
final class Gate extends CLIService {
    /**
     * Connection settings accepted, and dropped: the Hive JDBC driver (beeline, DBeaver, Tableau's
     * Hive driver) sends its fetch size with every OpenSession, and each FetchResults call names
     * its own row count, so the server needs nothing of it.
     */
    static final Set<String> DROPPED = Set.of("set:hiveconf:hive.server2.thrift.resultset.default.fetch.size");

    static final String USE = "use:database";

    /** The session setting naming the scheduler pool its statements run in (Spark's Thrift server's). */
    static final String POOL = "spark.sql.thriftserver.scheduler.pool";

    /** The most sessions one token may have open at once ({@code sqlserver.sessions_per_token}). */
    static volatile int sessionsPerToken = 16;

    private final CLIService spark;

    Gate(CLIService spark) {
        super(null);
        this.spark = spark;
    }

    // -- sessions ----------------------------------------------------------------------------------

    @Override
    public SessionHandle openSession(TProtocolVersion protocol, String user, String password,
            Map<String, String> configuration) throws HiveSQLException {
        String database = admit(configuration);
        return bind(call(() -> spark.openSession(protocol, user, password, Map.of())), database);
    }

    @Override
    public SessionHandle openSession(TProtocolVersion protocol, String user, String password, String address,
            Map<String, String> configuration) throws HiveSQLException {
        String database = admit(configuration);
        return bind(call(() -> spark.openSession(protocol, user, password, address, Map.of())), database);
    }

    @Override
    public SessionHandle openSession(String user, String password, Map<String, String> configuration)
            throws HiveSQLException {
        String database = admit(configuration);
        return bind(call(() -> spark.openSession(user, password, Map.of())), database);
    }

    // HiveServer2 opens every session "with impersonation" (hive.server2.enable.doAs defaults to
    // true): of the user who logged in, since proxy users are refused with the other settings
    @Override
    public SessionHandle openSessionWithImpersonation(TProtocolVersion protocol, String user, String password,
            Map<String, String> configuration, String delegationToken) throws HiveSQLException {
        String database = admit(configuration);
        noDelegation(delegationToken);
        return bind(call(() -> spark.openSessionWithImpersonation(protocol, user, password, Map.of(), null)),
            database);
    }

    @Override
    public SessionHandle openSessionWithImpersonation(TProtocolVersion protocol, String user, String password,
            String address, Map<String, String> configuration, String delegationToken) throws HiveSQLException {
        String database = admit(configuration);
        noDelegation(delegationToken);
        return bind(call(() -> spark.openSessionWithImpersonation(protocol, user, password, address, Map.of(),
            null)), database);
    }

    @Override
    public SessionHandle openSessionWithImpersonation(String user, String password,
            Map<String, String> configuration, String delegationToken) throws HiveSQLException {
        String database = admit(configuration);
        noDelegation(delegationToken);
        return bind(call(() -> spark.openSessionWithImpersonation(user, password, Map.of(), null)), database);
    }

    private static void noDelegation(String delegationToken) throws HiveSQLException {
        if (delegationToken != null) {
            throw impersonation();
        }
    }

    @Override
    public void closeSession(SessionHandle session) throws HiveSQLException {
        run(() -> spark.closeSession(session));
    }

    /** The {@code use:database} a client's settings name (null: none), refusing any other setting. */
    static String admit(Map<String, String> configuration) throws HiveSQLException {
        String database = null;
        if (configuration == null) {
            return null;
        }
        for (Map.Entry<String, String> e : new TreeMap<>(configuration).entrySet()) {
            String key = e.getKey();
            if (USE.equals(key)) {
                database = e.getValue();
            } else if (!DROPPED.contains(key)) {
                String shown = key.length() > 80 ? key.substring(0, 80) + "…" : key;
                throw new Extensions.Refused("connection setting " + shown + " is not accepted: every session runs with "
                    + "the SQL server's settings (no set:hiveconf, set:hivevar or proxy user; USE a namespace instead)");
            }
        }
        return database;
    }

    /**
     * A session just opened: its statements run in its token's scheduler pool (the pools, and
     * the statements in them, share the executors fairly: {@link Preemption}); at most {@link #sessionsPerToken} are open per
     * token; and {@code use:database} is checked as {@code USE} is, now that it is bound to its login.
     */
    private SessionHandle bind(SessionHandle handle, String database) throws HiveSQLException {
        try {
            String[] client = Hooks.clientOf(handle);
            org.apache.spark.sql.SparkSession session = Hooks.sessionOf(handle);
            Bridge b = Hooks.bridge();
            if (client == null || session == null || b == null) {
                throw new Extensions.Refused("the session could not be opened: reconnect");
            }
            String user = client[1];
            if (Hooks.sessionsOf(user) > sessionsPerToken) {
                throw new Extensions.Refused("token " + user + " has " + sessionsPerToken + " sessions open already "
                    + "(sqlserver.sessions_per_token): close one first");
            }
            session.conf().set(POOL, Preemption.poolFor(session.sparkContext(), user));
            if (database == null) {
                return handle;
            }
            List<String> parts = CollectionConverters.asJava(
                ((org.apache.spark.sql.classic.SparkSession) session).sessionState().sqlParser()
                    .parseMultipartIdentifier(database));
            if (parts.size() != 1) {
                throw new Extensions.Refused("use:database " + database + ": give one namespace name");
            }
            String answer = b.decide(client, "use", new String[0], parts.toArray(new String[0]), session);
            if (answer == null || !answer.startsWith("OK:")) {
                throw new Extensions.Refused(answer == null ? "the SQL server could not check use:database"
                    : "use:database: " + answer.substring(4));
            }
            Statements.discard(answer.substring(3, answer.indexOf(':', 3)));
            return handle;
        } catch (Throwable e) {
            try {
                spark.closeSession(handle);
            } catch (HiveSQLException ignored) {
                // the client is told why its session did not open; a session half-open is closed or gone
            }
            throw oneLine(e);
        }
    }

    private static HiveSQLException impersonation() {
        return new Extensions.Refused("delegation tokens are not supported: log in with a token's name and the "
            + "token");
    }

    // -- statements and their results ----------------------------------------------------------------

    @Override
    public OperationHandle executeStatement(SessionHandle session, String statement, Map<String, String> overlay)
            throws HiveSQLException {
        noOverlay(overlay);
        return call(() -> spark.executeStatement(session, statement, Map.of()));
    }

    @Override
    public OperationHandle executeStatement(SessionHandle session, String statement, Map<String, String> overlay,
            long timeout) throws HiveSQLException {
        noOverlay(overlay);
        return call(() -> spark.executeStatement(session, statement, Map.of(), timeout));
    }

    @Override
    public OperationHandle executeStatementAsync(SessionHandle session, String statement,
            Map<String, String> overlay) throws HiveSQLException {
        noOverlay(overlay);
        return call(() -> spark.executeStatementAsync(session, statement, Map.of()));
    }

    @Override
    public OperationHandle executeStatementAsync(SessionHandle session, String statement,
            Map<String, String> overlay, long timeout) throws HiveSQLException {
        noOverlay(overlay);
        return call(() -> spark.executeStatementAsync(session, statement, Map.of(), timeout));
    }

    private static void noOverlay(Map<String, String> overlay) throws HiveSQLException {
        if (overlay != null && !overlay.isEmpty()) {
            throw new Extensions.Refused("statement settings are not accepted: every statement runs with the SQL "
                + "server's settings");
        }
    }

    @Override
    public OperationStatus getOperationStatus(OperationHandle operation) throws HiveSQLException {
        OperationStatus status = call(() -> spark.getOperationStatus(operation));
        HiveSQLException failure = status.getOperationException();
        return failure == null ? status : new OperationStatus(status.getState(), oneLine(failure));
    }

    @Override
    public void cancelOperation(OperationHandle operation) throws HiveSQLException {
        run(() -> spark.cancelOperation(operation));
    }

    @Override
    public void closeOperation(OperationHandle operation) throws HiveSQLException {
        run(() -> spark.closeOperation(operation));
    }

    @Override
    public TTableSchema getResultSetMetadata(OperationHandle operation) throws HiveSQLException {
        return call(() -> spark.getResultSetMetadata(operation));
    }

    @Override
    public TRowSet fetchResults(OperationHandle operation) throws HiveSQLException {
        return call(() -> spark.fetchResults(operation));
    }

    @Override
    public TRowSet fetchResults(OperationHandle operation, FetchOrientation orientation, long maxRows,
            FetchType fetchType) throws HiveSQLException {
        return call(() -> spark.fetchResults(operation, orientation, maxRows, fetchType));
    }

    @Override
    public String getQueryId(TOperationHandle operation) throws HiveSQLException {
        return call(() -> spark.getQueryId(operation));
    }

    // -- metadata ---------------------------------------------------------------------------------

    @Override
    public GetInfoValue getInfo(SessionHandle session, GetInfoType type) throws HiveSQLException {
        return call(() -> spark.getInfo(session, type));
    }

    @Override
    public OperationHandle getTypeInfo(SessionHandle session) throws HiveSQLException {
        valid(session);
        return call(() -> spark.getTypeInfo(session));
    }

    @Override
    public OperationHandle getCatalogs(SessionHandle session) throws HiveSQLException {
        valid(session);
        return call(() -> spark.getCatalogs(session));
    }

    @Override
    public OperationHandle getSchemas(SessionHandle session, String catalog, String schema)
            throws HiveSQLException {
        valid(session);
        return call(() -> spark.getSchemas(session, catalog, schema));
    }

    @Override
    public OperationHandle getTables(SessionHandle session, String catalog, String schema, String table,
            List<String> types) throws HiveSQLException {
        valid(session);
        return call(() -> spark.getTables(session, catalog, schema, table, types));
    }

    @Override
    public OperationHandle getTableTypes(SessionHandle session) throws HiveSQLException {
        valid(session);
        return call(() -> spark.getTableTypes(session));
    }

    @Override
    public OperationHandle getColumns(SessionHandle session, String catalog, String schema, String table,
            String column) throws HiveSQLException {
        valid(session);
        return call(() -> spark.getColumns(session, catalog, schema, table, column));
    }

    @Override
    public OperationHandle getFunctions(SessionHandle session, String catalog, String schema, String function)
            throws HiveSQLException {
        valid(session);
        return call(() -> spark.getFunctions(session, catalog, schema, function));
    }

    @Override
    public OperationHandle getPrimaryKeys(SessionHandle session, String catalog, String schema, String table)
            throws HiveSQLException {
        valid(session);
        return call(() -> spark.getPrimaryKeys(session, catalog, schema, table));
    }

    @Override
    public OperationHandle getCrossReference(SessionHandle session, String primaryCatalog, String primarySchema,
            String primaryTable, String foreignCatalog, String foreignSchema, String foreignTable)
            throws HiveSQLException {
        valid(session);
        return call(() -> spark.getCrossReference(session, primaryCatalog, primarySchema, primaryTable,
            foreignCatalog, foreignSchema, foreignTable));
    }

    @Override
    public HiveConf getSessionConf(SessionHandle session) throws HiveSQLException {
        return call(() -> spark.getSessionConf(session));
    }

    /** Refuse a metadata call of a session whose token is no longer valid. */
    private static void valid(SessionHandle session) throws HiveSQLException {
        String[] client = Hooks.clientOf(session);
        Bridge b = Hooks.bridge();
        String why = client == null || b == null ? "the session is not open: reconnect" : b.check(client);
        if (why != null) {
            throw new Extensions.Refused(why);
        }
    }

    // -- delegation tokens: never ------------------------------------------------------------------

    @Override
    public synchronized String getDelegationTokenFromMetaStore(String owner)
            throws HiveSQLException, UnsupportedOperationException, LoginException, IOException {
        // what Hive's own service answers without a Kerberos metastore: the Thrift service then
        // opens the session with no delegation token
        throw new UnsupportedOperationException("delegation tokens are not supported");
    }

    @Override
    public String getDelegationToken(SessionHandle session, HiveAuthFactory auth, String owner, String renewer)
            throws HiveSQLException {
        throw impersonation();
    }

    @Override
    public void cancelDelegationToken(SessionHandle session, HiveAuthFactory auth, String token)
            throws HiveSQLException {
        throw impersonation();
    }

    @Override
    public void renewDelegationToken(SessionHandle session, HiveAuthFactory auth, String token)
            throws HiveSQLException {
        throw impersonation();
    }

    // -- the service itself: Spark's ----------------------------------------------------------------

    @Override
    public synchronized HiveConf getHiveConf() {
        return spark.getHiveConf();
    }

    @Override
    public SessionManager getSessionManager() {
        return spark.getSessionManager();
    }

    @Override
    public UserGroupInformation getServiceUGI() {
        return spark.getServiceUGI();
    }

    @Override
    public UserGroupInformation getHttpUGI() {
        return spark.getHttpUGI();
    }

    // -- errors: one line ----------------------------------------------------------------------------

    interface Call<T> {
        T call() throws Exception;
    }

    interface Run {
        void run() throws Exception;
    }

    private static <T> T call(Call<T> call) throws HiveSQLException {
        try {
            return call.call();
        } catch (Throwable e) {
            throw oneLine(e);
        }
    }

    private static void run(Run run) throws HiveSQLException {
        call(() -> {
            run.run();
            return null;
        });
    }

    /**
     * What a client is told of {@code e}: a refusal as it is; any other error as the first line of
     * its message (never a stack, never the plan Spark prints after it), with its SQL state.
     */
    // A task's StoreUnavailableError (metastore/errors.py), raised in the Python worker that read a
    // table's files in a bucket: its line in the worker's traceback is what the client needs (the
    // store's address and what it answered), not the traceback's first line.
    private static final Pattern STORE_UNAVAILABLE = Pattern.compile("StoreUnavailableError: (the store at .+)");

    static HiveSQLException oneLine(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof Extensions.Refused refused) { // a fresh one: Spark may have set a stack on it
                return refused.copy();
            }
        }
        for (Throwable t = e; t != null; t = t.getCause()) {
            Matcher store = STORE_UNAVAILABLE.matcher(t.getMessage() == null ? "" : t.getMessage());
            if (store.find()) {
                return new Extensions.Refused(store.group(1).strip(), "08S01"); // SQLSTATE: connection failure
            }
        }
        String state = e instanceof HiveSQLException h ? h.getSQLState() : null;
        String message = e.getMessage();
        if (message == null || message.isBlank()) {
            message = e.getCause() != null && e.getCause().getMessage() != null
                ? e.getCause().getMessage()
                : e.getClass().getSimpleName();
        }
        return new Extensions.Refused(message, state);
    }
}
