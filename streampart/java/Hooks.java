package streampart.sqlserver;

import java.util.Map;

import org.apache.hive.service.Service;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.HiveSession;
import org.apache.hive.service.cli.session.HiveSessionImpl;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.cli.thrift.ThriftCLIService;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;

/**
 * The running server's Python bridge, the Thrift server whose sessions it serves, and which
 * SparkSessions are the server's own: in a serving JVM every other session is a client's, and
 * is held to the gate ({@link Extensions.Parser}, {@link Policy}, {@link Gate}).
 */
public final class Hooks {
    private static volatile Bridge bridge;
    private static volatile SessionManager sessions;
    private static volatile SparkSession own;

    private Hooks() {}

    /**
     * Serve {@code server}'s clients through {@code b}: every Thrift call of a client now passes
     * {@link Gate}, and every session but {@code serverSession} is a client's. Until this returns,
     * logins are refused ({@link Auth}), so no client session exists before the gate does.
     */
    public static void install(Bridge b, Object server, SparkSession serverSession, int sessionsPerToken)
            throws Exception {
        own = serverSession;
        Gate.sessionsPerToken = sessionsPerToken;
        // a second fence behind the functions Policy refuses: the JDK's XML parsers (from_xml's
        // among them) load no external DTD, schema or stylesheet, by any protocol
        for (String property : new String[] {
            "javax.xml.accessExternalDTD", "javax.xml.accessExternalSchema", "javax.xml.accessExternalStylesheet"}) {
            System.setProperty(property, "");
        }
        for (Service s : ((org.apache.hive.service.CompositeService) server).getServices()) {
            if (s instanceof CLIService cli) {
                sessions = cli.getSessionManager();
            }
        }
        for (Service s : ((org.apache.hive.service.CompositeService) server).getServices()) {
            if (s instanceof ThriftCLIService thrift) {
                java.lang.reflect.Field field = ThriftCLIService.class.getDeclaredField("cliService");
                field.setAccessible(true);
                field.set(thrift, new Gate((CLIService) field.get(thrift)));
                front(thrift);
            }
        }
        if (sessions == null) {
            throw new IllegalStateException("the Thrift server has no CLI service to gate");
        }
        Preemption.start(serverSession.sparkContext());
        bridge = b;
    }

    /**
     * Put {@link Front} before {@code thrift}'s Thrift server: its connections' processors then
     * read an OpenSession's settings before Hive's service does. The Thrift server is made on the
     * service's own thread as it starts: wait for it (a few seconds at most).
     */
    private static void front(ThriftCLIService thrift) throws Exception {
        java.lang.reflect.Field field = null;
        for (Class<?> c = thrift.getClass(); c != null && field == null; c = c.getSuperclass()) {
            try {
                field = c.getDeclaredField("server");
            } catch (NoSuchFieldException e) {
                // declared by a superclass
            }
        }
        if (field == null) {
            throw new IllegalStateException("the Thrift service has no server to put a front before");
        }
        field.setAccessible(true);
        long deadline = System.currentTimeMillis() + 60_000;
        Object tserver = field.get(thrift);
        while (tserver == null && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
            tserver = field.get(thrift);
        }
        if (tserver == null) {
            throw new IllegalStateException("the Thrift server did not start within 60 s");
        }
        java.lang.reflect.Field factory = org.apache.thrift.server.TServer.class.getDeclaredField("processorFactory_");
        factory.setAccessible(true);
        factory.set(tserver, Front.processors(thrift));
    }

    /** Whether {@code spark} is a client's session of a serving SQL server (not the server's own). */
    static boolean isClient(SparkSession spark) {
        return bridge != null && spark != own;
    }

    private static final Map<SparkSession, String> LOGINS =
        java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());

    static void remember(SparkSession spark, String digest) {
        if (digest != null) {
            LOGINS.put(spark, digest);
        }
    }

    public static Bridge bridge() {
        return bridge;
    }

    /** The ids of the client sessions open now (empty before the server started). */
    public static String[] openSessions() {
        SessionManager manager = sessions;
        if (manager == null) {
            return new String[0];
        }
        SparkSQLOperationManager operations = (SparkSQLOperationManager) manager.getOperationManager();
        return operations.sessionToContexts().keySet().stream()
            .map(h -> h.getSessionId().toString())
            .toArray(String[]::new);
    }

    /**
     * The client session a SparkSession serves — {session id, user, SHA-256 of the password it
     * logged in with (hex), client address} — or null for any other session. The digest ties the
     * session to the token it logged in with, not to the token's name (a token revoked and made
     * again under the same name is another token).
     */
    public static String[] clientOf(SparkSession spark) {
        SessionManager manager = sessions;
        if (manager == null) {
            return null;
        }
        SparkSQLOperationManager operations = (SparkSQLOperationManager) manager.getOperationManager();
        for (Map.Entry<SessionHandle, SparkSession> e : operations.sessionToContexts().entrySet()) {
            if (e.getValue() == spark) {
                return describe(manager, e.getKey(), spark);
            }
        }
        return null;
    }

    /** {@link #clientOf} the client session {@code handle}, or null if it is not open. */
    static String[] clientOf(SessionHandle handle) {
        SessionManager manager = sessions;
        if (manager == null) {
            return null;
        }
        SparkSQLOperationManager operations = (SparkSQLOperationManager) manager.getOperationManager();
        SparkSession spark = operations.sessionToContexts().get(handle);
        return spark == null ? null : describe(manager, handle, spark);
    }

    /** How many client sessions are open with user name {@code user}. */
    static int sessionsOf(String user) {
        SessionManager manager = sessions;
        if (manager == null) {
            return 0;
        }
        int n = 0;
        SparkSQLOperationManager operations = (SparkSQLOperationManager) manager.getOperationManager();
        for (SessionHandle handle : operations.sessionToContexts().keySet()) {
            try {
                if (user.equals(manager.getSession(handle).getUserName())) {
                    n++;
                }
            } catch (Exception closed) {
                // closed meanwhile: not open
            }
        }
        return n;
    }

    /** The Spark session of client session {@code handle}, or null if it is not open. */
    static SparkSession sessionOf(SessionHandle handle) {
        SessionManager manager = sessions;
        if (manager == null) {
            return null;
        }
        return ((SparkSQLOperationManager) manager.getOperationManager()).sessionToContexts().get(handle);
    }

    private static String[] describe(SessionManager manager, SessionHandle handle, SparkSession spark) {
        try {
            HiveSession session = manager.getSession(handle);
            String password = session instanceof HiveSessionImpl impl ? impl.getPassword() : null;
            String address = session instanceof HiveSessionImpl impl ? impl.getIpAddress() : null;
            String digest = password != null && !password.isEmpty() ? sha256(password) : LOGINS.get(spark);
            return new String[] {
                handle.getSessionId().toString(),
                session.getUserName(),
                digest == null ? "" : digest,
                address == null ? "" : address,
            };
        } catch (Exception missing) {
            return null;
        }
    }

    /**
     * Put the settings of {@code server}'s SQL conf back in a client's session: what the client
     * sent when it connected (JDBC URL settings, Hive variables) is undone.
     */
    public static void settle(SparkSession client, SparkSession server) {
        org.apache.spark.sql.internal.SQLConf mine =
            ((org.apache.spark.sql.classic.SparkSession) client).sessionState().conf();
        org.apache.spark.sql.internal.SQLConf theirs =
            ((org.apache.spark.sql.classic.SparkSession) server).sessionState().conf();
        Map<String, String> given = scala.jdk.javaapi.CollectionConverters.asJava(mine.getAllConfs());
        Map<String, String> wanted = scala.jdk.javaapi.CollectionConverters.asJava(theirs.getAllConfs());
        for (String key : new java.util.ArrayList<>(given.keySet())) {
            if (key.equals(Gate.POOL)) {
                continue; // the token's scheduler pool, set when the session opened
            }
            String value = wanted.get(key);
            if (value == null) {
                mine.unsetConf(key);
            } else if (!value.equals(given.get(key))) {
                mine.setConfString(key, value);
            }
        }
        for (Map.Entry<String, String> e : wanted.entrySet()) {
            if (!given.containsKey(e.getKey())) {
                mine.setConfString(e.getKey(), e.getValue());
            }
        }
    }

    static String sha256(String text) throws java.security.NoSuchAlgorithmException {
        byte[] digest = java.security.MessageDigest.getInstance("SHA-256")
            .digest(text.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (byte b : digest) {
            out.append(String.format("%02x", b));
        }
        return out.toString();
    }
}
