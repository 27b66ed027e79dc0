package streampart.sqlserver;

import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/** HiveServer2's CUSTOM authentication: the password is a streampart API token, checked in Python. */
public final class Auth implements PasswdAuthenticationProvider {
    private static final long STARTING_WAIT_MS = 120_000;

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        Bridge b = Hooks.bridge();
        // The port accepts connections a moment before the server's hooks are in place: a login
        // then waits for them (a refusal would read as wrong credentials: the client hears only
        // "Error validating the login").
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
            throw new AuthenticationException("the SQL server is starting; try again");
        }
        String refused = b.authenticate(user == null ? "" : user, password == null ? "" : password);
        if (refused != null) {
            throw new AuthenticationException(refused);
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
}
