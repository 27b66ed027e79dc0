package streampart.sqlserver;

import java.security.Provider;
import java.security.Security;
import java.util.Map;

import javax.security.auth.callback.CallbackHandler;
import javax.security.sasl.AuthenticationException;
import javax.security.sasl.SaslException;
import javax.security.sasl.SaslServer;
import javax.security.sasl.SaslServerFactory;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;
import org.apache.hive.service.auth.PlainSaslServer;

/**
 * HiveServer2's CUSTOM authentication: the password is a streampart API token, checked in Python;
 * a refused login tells the client why ({@link #tellRefusals}).
 */
public final class Auth implements PasswdAuthenticationProvider {
    private static final long STARTING_WAIT_MS = 120_000;

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        Bridge b = Hooks.bridge();
        // The port accepts connections a moment before the server's hooks are in place: a login
        // then waits for them (a refusal would read as wrong credentials).
        for (long waited = 0; b == null && waited < STARTING_WAIT_MS; waited += 50) {
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
            b = Hooks.bridge();
        }
        if (b == null) {
            throw new LoginRefused("login refused: the SQL server is starting; try again");
        }
        String refused = b.authenticate(user == null ? "" : user, password == null ? "" : password);
        if (refused != null) {
            throw new LoginRefused(refused);
        }
        try {
            LOGGED_IN.set(Hooks.sha256(password == null ? "" : password));
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new AuthenticationException("SHA-256 is missing");
        }
    }

    // The digest of the password this connection's thread logged in with: the client session that
    // the same thread opens next is bound to it (clients that send no password in OpenSession).
    private static final ThreadLocal<String> LOGGED_IN = new ThreadLocal<>();

    static String loggedIn() {
        return LOGGED_IN.get();
    }

    // -- what a refused client is told ---------------------------------------------------------------

    /**
     * A refused login, and the line its client is told: the driver's answer
     * ({@code SqlGate.authenticate}), written for a client that has not logged in.
     */
    static final class LoginRefused extends AuthenticationException {
        LoginRefused(String why) {
            super(Extensions.firstLine(why));
        }
    }

    private static final String PROVIDER = "streampart-sasl-plain";

    /**
     * Let HiveServer2's PLAIN SASL server (the one binary-mode logins go through) tell a refused
     * client why, before the server listens: Hive's answers every refusal with "Error validating
     * the login" in the SASL status a client prints ("Peer indicated failure: …"), and keeps the
     * reason for its log. A security provider ahead of Hive's ({@link Plain}) makes Hive's server
     * and puts it behind {@link Told}, which tells a {@link LoginRefused}'s line instead; every
     * other failure stays as Hive words it, and nothing that fails is let through.
     */
    public static synchronized void tellRefusals() {
        if (Security.getProvider(PROVIDER) == null) {
            Security.insertProviderAt(new Plain(), 1);
        }
    }

    /** The security provider of {@link Factory}: SASL's PLAIN servers of this JVM are Hive's, told. */
    static final class Plain extends Provider {
        Plain() {
            super(PROVIDER, "1.0", "HiveServer2's PLAIN SASL server, telling a refused client why");
            putService(new Service(this, "SaslServerFactory", "PLAIN", Factory.class.getName(), null, null) {
                @Override
                public Object newInstance(Object parameter) {
                    return new Factory();
                }
            });
        }
    }

    /** Hive's PLAIN SASL servers, each behind {@link Told}. */
    static final class Factory implements SaslServerFactory {
        private final SaslServerFactory hive = new PlainSaslServer.SaslPlainServerFactory();

        @Override
        public SaslServer createSaslServer(String mechanism, String protocol, String serverName, Map<String, ?> props,
                CallbackHandler handler) throws SaslException {
            SaslServer server = hive.createSaslServer(mechanism, protocol, serverName, props, handler);
            return server == null ? null : new Told(server);
        }

        @Override
        public String[] getMechanismNames(Map<String, ?> props) {
            return hive.getMechanismNames(props);
        }
    }

    /** Hive's PLAIN SASL server, whose refusals say why: a {@link LoginRefused}'s line, not Hive's. */
    static final class Told implements SaslServer {
        private final SaslServer hive;

        Told(SaslServer hive) {
            this.hive = hive;
        }

        @Override
        public byte[] evaluateResponse(byte[] response) throws SaslException {
            try {
                return hive.evaluateResponse(response);
            } catch (SaslException e) {
                for (Throwable t = e.getCause(); t != null; t = t.getCause()) {
                    if (t instanceof LoginRefused refused) {
                        throw new SaslException(refused.getMessage(), e);
                    }
                }
                throw e;
            }
        }

        @Override
        public String getMechanismName() {
            return hive.getMechanismName();
        }

        @Override
        public boolean isComplete() {
            return hive.isComplete();
        }

        @Override
        public String getAuthorizationID() {
            return hive.getAuthorizationID();
        }

        @Override
        public byte[] unwrap(byte[] incoming, int offset, int len) throws SaslException {
            return hive.unwrap(incoming, offset, len);
        }

        @Override
        public byte[] wrap(byte[] outgoing, int offset, int len) throws SaslException {
            return hive.wrap(outgoing, offset, len);
        }

        @Override
        public Object getNegotiatedProperty(String name) {
            return hive.getNegotiatedProperty(name);
        }

        @Override
        public void dispose() throws SaslException {
            hive.dispose();
        }
    }
}
