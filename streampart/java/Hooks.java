package streampart.sqlserver;

import java.util.Map;

import org.apache.hive.service.Service;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.HiveSession;
import org.apache.hive.service.cli.session.HiveSessionImpl;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;

/** The running server's Python bridge and the Thrift server whose sessions it serves. */
public final class Hooks {
    private static volatile Bridge bridge;
    private static volatile SessionManager sessions;

    private Hooks() {}

    public static void install(Bridge b, Object server) {
        bridge = b;
        if (server instanceof org.apache.hive.service.CompositeService) {
            for (Service s : ((org.apache.hive.service.CompositeService) server).getServices()) {
                if (s instanceof CLIService) {
                    sessions = ((CLIService) s).getSessionManager();
                }
            }
        }
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
                try {
                    HiveSession session = manager.getSession(e.getKey());
                    String password = session instanceof HiveSessionImpl impl ? impl.getPassword() : null;
                    String address = session instanceof HiveSessionImpl impl ? impl.getIpAddress() : null;
                    String digest = password != null && !password.isEmpty() ? sha256(password) : LOGINS.get(spark);
                    return new String[] {
                        e.getKey().getSessionId().toString(),
                        session.getUserName(),
                        digest == null ? "" : digest,
                        address == null ? "" : address,
                    };
                } catch (Exception missing) {
                    return null;
                }
            }
        }
        return null;
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
