package streampart.sqlserver;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

import org.antlr.v4.runtime.CharStreams;
import org.antlr.v4.runtime.Token;
import org.apache.spark.sql.catalyst.analysis.RelationTimeTravel;
import org.apache.spark.sql.catalyst.analysis.UnresolvedNamespace;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableOrView;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableValuedFunction;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.parser.SqlBaseLexer;
import org.apache.spark.sql.catalyst.parser.UpperCaseCharStream;
import org.apache.spark.sql.catalyst.plans.logical.CompoundBody;
import org.apache.spark.sql.catalyst.plans.logical.DescribeRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SetCatalogAndNamespace;
import org.apache.spark.sql.catalyst.plans.logical.ShowTables;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedWith;
import org.apache.spark.sql.execution.command.SetNamespaceCommand;
import org.apache.spark.sql.execution.command.ShowNamespacesCommand;

import scala.Tuple3;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One client statement as Spark's own lexer and parser read it: the only reading that decides what
 * the statement is and which tables it reads.
 *
 * <p>The text is split into statements at the semicolons Spark's lexer finds (outside strings,
 * comments and quoted names, as Spark's parser would see them); every statement but the last must
 * be {@code USE namespace}, and the last is parsed by Spark's parser into the very plan Spark then
 * analyses and runs. A link written {@code t@b} (Spark's grammar has no {@code @}) is first made
 * the quoted name {@code `t@b`}, found among the tokens of that same lexer. What the plan is — one
 * query, {@code USE}, {@code SHOW SCHEMAS}, {@code SHOW TABLES}, {@code DESCRIBE} — is read off the
 * plan; anything else (a script, a command, several statements, DML, DDL, {@code SET}) is refused
 * here, before analysis. A query may hold only the plan nodes of {@link #QUERY_NODES}; its tables
 * are every relation in it, subqueries included ({@link #refs}).
 */
final class Reading {
    enum Kind { QUERY, USE, SHOW_SCHEMAS, SHOW_TABLES, DESCRIBE }

    /** The plan nodes Spark's parser makes of a query (simple class names): anything else is refused. */
    static final Set<String> QUERY_NODES = Set.of(
        "Project", "Filter", "Aggregate", "Join", "LateralJoin", "Union", "Intersect", "Except", "Sort",
        "GlobalLimit", "LocalLimit", "Offset", "Tail", "SubqueryAlias", "Distinct", "Sample", "Generate",
        "Pivot", "Unpivot", "RepartitionByExpression", "UnresolvedHint", "UnresolvedWith", "UnresolvedHaving",
        "UnresolvedSubqueryColumnAliases", "UnresolvedTVFAliases", "UnresolvedInlineTable", "WithWindowDefinition",
        "OneRowRelation", "LocalRelation", "UnresolvedRelation", "RelationTimeTravel",
        "UnresolvedTableValuedFunction", "PipeOperator");

    /** Table-valued functions a query may call: they read no table and no file. */
    static final Set<String> TABLE_FUNCTIONS = Set.of(
        "range", "explode", "explode_outer", "inline", "inline_outer", "posexplode", "posexplode_outer",
        "stack", "json_tuple");

    final Kind kind;
    final LogicalPlan plan;
    /** USE: the namespace; SHOW TABLES: the namespace (empty: the session's); DESCRIBE: the name. */
    final List<String> name;
    /** The namespaces of the leading {@code USE ns;} statements, in order (the last one applies). */
    final String[] used;

    private Reading(Kind kind, LogicalPlan plan, List<String> name, String[] used) {
        this.kind = kind;
        this.plan = plan;
        this.name = name;
        this.used = used;
    }

    /**
     * Read {@code sql} with Spark's lexer and {@code parser} (Spark's own).
     *
     * @throws Extensions.Refused anything but one query, USE, SHOW SCHEMAS, SHOW TABLES or DESCRIBE
     *     (leading USE statements allowed), naming why in one line
     */
    static Reading of(ParserInterface parser, String sql) {
        List<Piece> statements = statements(sql);
        if (statements.isEmpty()) {
            throw refused("the statement is empty: give one query (SELECT, WITH …)");
        }
        List<String> uses = new ArrayList<>();
        for (int i = 0; i < statements.size() - 1; i++) {
            LogicalPlan plan = parse(parser, sql, statements.get(i));
            List<String> namespace = useOf(plan);
            if (namespace == null) {
                throw refused("give one statement at a time (USE NAMESPACE; may come before it): "
                    + words(statements.get(i).text()) + " is followed by another statement");
            }
            if (namespace.size() != 1) {
                throw refused("USE " + String.join(".", namespace) + ": USE takes one namespace name");
            }
            uses.add(namespace.get(0));
        }
        String[] used = uses.toArray(new String[0]);
        Piece lastPiece = statements.get(statements.size() - 1);
        String last = lastPiece.text();
        LogicalPlan plan = parse(parser, sql, lastPiece);
        List<String> namespace = useOf(plan);
        if (namespace != null) {
            return new Reading(Kind.USE, plan, namespace, used);
        }
        if (plan instanceof ShowNamespacesCommand show) {
            if (show.pattern().isDefined() || !(show.child() instanceof UnresolvedNamespace ns)
                    || !ns.multipartIdentifier().isEmpty()) {
                throw refused("SHOW SCHEMAS lists every namespace the token may read; it takes no LIKE or IN");
            }
            return new Reading(Kind.SHOW_SCHEMAS, plan, List.of(), used);
        }
        if (plan instanceof ShowTables show) {
            if (show.pattern().isDefined()) {
                throw refused("SHOW TABLES lists the tables and links the token may read; it takes no LIKE");
            }
            List<String> in = show.namespace() instanceof UnresolvedNamespace ns
                ? CollectionConverters.asJava(ns.multipartIdentifier())
                : List.of();
            return new Reading(Kind.SHOW_TABLES, plan, in, used);
        }
        if (plan instanceof DescribeRelation describe && describe.relation() instanceof UnresolvedTableOrView t) {
            return new Reading(Kind.DESCRIBE, plan, CollectionConverters.asJava(t.multipartIdentifier()), used);
        }
        if (plan instanceof CompoundBody) {
            throw refused("a SQL script (BEGIN … END): the SQL server runs one query at a time");
        }
        String why = notAQuery(plan);
        if (why == null) {
            why = tooLarge(plan);
        }
        if (why != null) {
            throw refused(why.isEmpty()
                ? words(last) + ": the SQL server only reads (SELECT, WITH …); INSERT INTO, CREATE TABLE … AS and "
                    + "ALTER TABLE … ADD COLUMNS run with `streampart query`, tables are made, altered and dropped "
                    + "with `streampart table …`"
                : why);
        }
        return new Reading(Kind.QUERY, plan, List.of(), used);
    }

    /** The namespace a {@code USE} statement names, or null if {@code plan} is not one. */
    private static List<String> useOf(LogicalPlan plan) {
        if (plan instanceof SetCatalogAndNamespace use && use.child() instanceof UnresolvedNamespace ns) {
            return CollectionConverters.asJava(ns.multipartIdentifier());
        }
        if (plan instanceof SetNamespaceCommand use) {
            return CollectionConverters.asJava(use.namespace());
        }
        return null;
    }

    private static LogicalPlan parse(ParserInterface parser, String sql, Piece statement) {
        try {
            return parser.parsePlan(statement.text());
        } catch (ParseException e) {
            String words = words(statement.text());
            if (words.equals("USE CLUSTER")) {
                throw refused("USE CLUSTER: the SQL server reads each table on its primary; run a statement on "
                    + "another cluster with `streampart query --cluster C`");
            }
            throw syntaxError(sql, statement, e);
        }
    }

    /**
     * Why 100: the picture of a syntax error shows this many characters of the statement's line at
     * most, around the caret — enough for a line someone typed, not a generated statement's
     * megabyte-long line echoed back.
     */
    static final int PICTURE_WIDTH = 100;

    /**
     * Spark's error about {@code statement} of the client's text {@code sql}, as a client reads it:
     * Spark's first line (its error class and the token it stopped at), where that token is in the
     * text the client sent (line, column from 1), and that line with a caret under the token.
     * {@code streampart query} words the syntax errors it finds before Spark starts alike
     * ({@code streampart.query_errors.syntax_error}).
     */
    static RuntimeException syntaxError(String sql, Piece statement, ParseException e) {
        String what = Extensions.firstLine(e.getMessage())
            .replaceFirst("\\s*\\(line \\d+, pos \\d+\\)$", "")
            .replaceFirst("\\.$", "");
        String state = e.getSqlState() == null ? "42000" : e.getSqlState();
        scala.Option<Object> line = e.start().line();
        scala.Option<Object> pos = e.start().startPosition();
        if (line.isEmpty() || pos.isEmpty()) {
            return Extensions.<RuntimeException>sneaky(new Extensions.Refused(what, state));
        }
        // the token Spark stopped at, found by Spark's lexer where Spark's parser says it starts
        String text = statement.text();
        int[] at = charOffsets(text);
        int start = -1;
        int length = 0;
        SqlBaseLexer lexer = new SqlBaseLexer(new UpperCaseCharStream(CharStreams.fromString(text)));
        lexer.removeErrorListeners();
        for (Token t : lexer.getAllTokens()) {
            if (t.getLine() == (Integer) line.get() && t.getCharPositionInLine() == (Integer) pos.get()
                    && t.getChannel() == Token.DEFAULT_CHANNEL) {
                start = t.getStartIndex();
                length = t.getStopIndex() - t.getStartIndex() + 1;
                break;
            }
        }
        if (start < 0) { // the end of the statement, or a position between tokens
            start = lineStart(text, at, (Integer) line.get()) + (Integer) pos.get();
        }
        int where = statement.origin(at[Math.min(start, at.length - 1)]);
        return Extensions.<RuntimeException>sneaky(Extensions.Refused.syntax(what, picture(sql, where, length), state));
    }

    /** The code point where line {@code line} (from 1) of {@code text} starts. */
    private static int lineStart(String text, int[] at, int line) {
        int cp = 0;
        for (int seen = 1; seen < line && cp < at.length - 1; cp++) {
            if (text.charAt(at[cp]) == '\n') {
                seen++;
            }
        }
        return cp;
    }

    /**
     * " (line L, column C)", then the line of {@code sql} holding char {@code where} and a caret
     * line under its {@code length} code points (one caret at least), each indented by two spaces.
     */
    static String picture(String sql, int where, int length) {
        int from = sql.lastIndexOf('\n', where - 1) + 1;
        int to = sql.indexOf('\n', where);
        String shown = sql.substring(from, to < 0 ? sql.length() : to).replaceFirst("\r$", "");
        int lineNo = 1;
        for (int i = 0; i < from; i++) {
            lineNo += sql.charAt(i) == '\n' ? 1 : 0;
        }
        int column = sql.codePointCount(from, Math.min(where, from + shown.length()));
        String position = " (line " + lineNo + ", column " + (column + 1) + ")";
        int[] cps = shown.codePoints().toArray();
        int first = 0;
        int last = cps.length;
        if (cps.length > PICTURE_WIDTH) { // a window around the caret
            first = Math.max(0, Math.min(column - PICTURE_WIDTH / 3, cps.length - PICTURE_WIDTH));
            last = first + PICTURE_WIDTH;
        }
        StringBuilder line = new StringBuilder(first > 0 ? "…" : "");
        StringBuilder caret = new StringBuilder(first > 0 ? " " : "");
        for (int i = first; i < last; i++) {
            line.appendCodePoint(cps[i]);
            if (i < column) {
                caret.append(cps[i] == '\t' ? '\t' : ' '); // a tab in the line: a tab above the caret too
            }
        }
        line.append(last < cps.length ? "…" : "");
        int carets = Math.max(1, Math.min(length, last - column));
        return position + "\n  " + line + "\n  " + caret + "^".repeat(carets);
    }

    /**
     * Why {@code plan} is not one query: "" for a statement of another kind, a reason for a query
     * holding what queries may not, null for a query.
     */
    private static String notAQuery(LogicalPlan plan) {
        String[] why = new String[1];
        visit(plan, p -> {
            if (why[0] != null) {
                return;
            }
            String kind = p.getClass().getSimpleName();
            if (kind.equals("ScriptTransformation")) {
                why[0] = "TRANSFORM … USING runs a program; queries may not run programs";
            } else if (!QUERY_NODES.contains(kind)) {
                why[0] = p == plan ? "" : kind + " in a query: queries read streampart tables (SELECT, WITH …) and "
                    + "nothing else";
            } else if (p instanceof UnresolvedRelation r && (!r.options().isEmpty() || r.isStreaming())) {
                why[0] = "table " + String.join(".", CollectionConverters.asJava(r.multipartIdentifier()))
                    + ": a table is read as it is, without options or STREAM";
            } else if (p instanceof UnresolvedTableValuedFunction f) {
                List<String> name = CollectionConverters.asJava(f.name());
                if (name.size() != 1 || !TABLE_FUNCTIONS.contains(name.get(0).toLowerCase(Locale.ROOT))) {
                    why[0] = String.join(".", name) + "() in FROM: queries read streampart tables (NAMESPACE.TABLE), "
                        + "range() and generators (explode, inline, stack, …) only, not files or other table functions";
                }
            }
        });
        return why[0];
    }

    /**
     * Why 50,000: Spark's analysis, optimisation and code generation of a statement take time
     * and memory in the server's own JVM, growing faster than its expressions do — a statement of
     * 10,000 OR terms (40,000 expressions) ran 33 s on a loaded 2-core machine, one of 100,000 ran
     * the server out of memory after minutes — while what analysts and BI tools write stays far
     * below (an IN list of 20,000 values is 20,001).
     */
    static final int MAX_EXPRESSIONS = 50_000;

    /** Why {@code plan} holds too many expressions to be analysed here, or null. */
    private static String tooLarge(LogicalPlan plan) {
        int[] count = new int[1];
        visit(plan, p -> {
            java.util.ArrayDeque<Expression> todo = new java.util.ArrayDeque<>(CollectionConverters.asJava(p.expressions()));
            while (!todo.isEmpty() && count[0] <= MAX_EXPRESSIONS) {
                Expression e = todo.pop();
                count[0]++;
                todo.addAll(CollectionConverters.asJava(e.children()));
            }
        });
        return count[0] <= MAX_EXPRESSIONS ? null
            : "the statement holds more than " + String.format("%,d", MAX_EXPRESSIONS) + " expressions: write long "
                + "OR chains as IN (…), or split the statement";
    }

    /**
     * Each table reference of the query, encoded for the driver: its key ({@link Statements#key}),
     * its name parts as written, the version asked for ({@code =n} or empty), the time asked for
     * ({@code =text}, {@code ?} when not a literal, or empty), and {@code cte} when a common table
     * expression of the statement has that name — separated by U+0003, the parts by U+0001.
     */
    String[] refs() {
        Set<String> ctes = new HashSet<>();
        visit(plan, p -> {
            if (p instanceof UnresolvedWith with) {
                for (Tuple3<String, SubqueryAlias, scala.Option<Object>> cte
                        : CollectionConverters.asJava(with.cteRelations())) {
                    ctes.add(cte._1().toLowerCase(Locale.ROOT));
                }
            }
        });
        List<String> out = new ArrayList<>();
        Set<Object> timeTravelled = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        visit(plan, p -> {
            List<String> parts;
            String version = null;
            String timestamp = null;
            if (p instanceof RelationTimeTravel rt && rt.relation() instanceof UnresolvedRelation r) {
                timeTravelled.add(r);
                parts = CollectionConverters.asJava(r.multipartIdentifier());
                version = rt.version().isDefined() ? rt.version().get() : null;
                if (rt.timestamp().isDefined()) {
                    timestamp = timestampKey(rt.timestamp().get());
                }
            } else if (p instanceof UnresolvedRelation r && !timeTravelled.contains(r)) {
                parts = CollectionConverters.asJava(r.multipartIdentifier());
            } else {
                return;
            }
            for (String part : parts) {
                checkPrintable(part);
            }
            checkPrintable(version);
            checkPrintable(timestamp);
            boolean cte = parts.size() == 1 && ctes.contains(parts.get(0).toLowerCase(Locale.ROOT));
            out.add(Statements.key(parts, version, timestamp) + '\u0003' + String.join("\u0001", parts) + '\u0003'
                + (version == null ? "" : "=" + version) + '\u0003' + (timestamp == null ? "" : "=" + timestamp)
                + '\u0003' + (cte ? "cte" : ""));
        });
        return out.toArray(new String[0]);
    }

    /** How {@code TIMESTAMP AS OF} is keyed: a literal's text, else "?" (refused by the driver). */
    static String timestampKey(Expression ts) {
        return ts instanceof Literal lit && lit.value() != null ? lit.value().toString() : "?";
    }

    private static void checkPrintable(String text) {
        if (text == null) {
            return;
        }
        for (int i = 0; i < text.length(); i++) {
            if (text.charAt(i) < 0x20) {
                throw refused("a table name or version holds a control character");
            }
        }
    }

    /**
     * Every node of {@code plan}, parents first: its children, the plans of its subquery
     * expressions, and the plans it holds besides its children (a WITH clause's definitions).
     */
    static void visit(LogicalPlan plan, java.util.function.Consumer<LogicalPlan> each) {
        each.accept(plan);
        for (LogicalPlan sub : CollectionConverters.asJava(plan.subqueries())) {
            visit(sub, each);
        }
        for (Object inner : CollectionConverters.asJava(plan.innerChildren())) {
            if (inner instanceof LogicalPlan p) {
                visit(p, each);
            }
        }
        for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
            visit(child, each);
        }
    }

    // -- Spark's lexer ---------------------------------------------------------------------------

    /**
     * One statement of a client's text, as Spark's parser reads it ({@link #text}), and where in
     * that text each of its chars came from: a syntax error points at what the client wrote.
     */
    static final class Piece {
        private final StringBuilder text = new StringBuilder();
        private int[] origin = new int[64];

        String text() {
            return text.toString();
        }

        /** Where char {@code i} of {@link #text} is in the client's text (its end: right after it). */
        int origin(int i) {
            if (i < text.length()) {
                return origin[i];
            }
            return text.length() == 0 ? 0 : origin[text.length() - 1] + 1;
        }

        /** Chars {@code [from, to)} of {@code sql}, as they are. */
        void copy(String sql, int from, int to) {
            for (int c = from; c < to; c++) {
                put(sql.charAt(c), c);
            }
        }

        /** {@code s}, written in place of what starts at char {@code from} of the client's text. */
        void write(String s, int from) {
            for (int i = 0; i < s.length(); i++) {
                put(s.charAt(i), from);
            }
        }

        private void put(char c, int from) {
            if (text.length() == origin.length) {
                origin = java.util.Arrays.copyOf(origin, origin.length * 2);
            }
            origin[text.length()] = from;
            text.append(c);
        }
    }

    /**
     * The statements of {@code sql}: split at the semicolons Spark's lexer finds, each with its
     * links ({@code t@b}) quoted; statements of nothing but spaces and comments are dropped.
     */
    static List<Piece> statements(String sql) {
        SqlBaseLexer lexer = new SqlBaseLexer(new UpperCaseCharStream(CharStreams.fromString(sql)));
        lexer.removeErrorListeners();
        List<? extends Token> tokens = lexer.getAllTokens();
        int[] at = charOffsets(sql);
        List<Piece> out = new ArrayList<>();
        Piece current = new Piece();
        boolean meaningful = false;
        int last = 0; // code points of sql consumed
        for (int i = 0; i < tokens.size(); i++) {
            Token t = tokens.get(i);
            slice(current, sql, at, last, t.getStartIndex());
            last = t.getStopIndex() + 1;
            if (t.getChannel() != Token.DEFAULT_CHANNEL) {
                slice(current, sql, at, t.getStartIndex(), last);
                continue;
            }
            if (t.getType() == SqlBaseLexer.SEMICOLON) {
                if (meaningful) {
                    out.add(current);
                }
                current = new Piece();
                meaningful = false;
                continue;
            }
            meaningful = true;
            if (i + 2 < tokens.size() && isName(tokens.get(i)) && "@".equals(tokens.get(i + 1).getText())
                    && isName(tokens.get(i + 2))
                    && tokens.get(i + 1).getStartIndex() == last
                    && tokens.get(i + 2).getStartIndex() == tokens.get(i + 1).getStopIndex() + 1) {
                String link = unquote(t.getText()) + "@" + unquote(tokens.get(i + 2).getText());
                current.write('`' + link.replace("`", "``") + '`', at[t.getStartIndex()]);
                last = tokens.get(i + 2).getStopIndex() + 1;
                i += 2;
                continue;
            }
            slice(current, sql, at, t.getStartIndex(), last);
        }
        slice(current, sql, at, last, at.length - 1);
        if (meaningful) {
            out.add(current);
        }
        return out;
    }

    /** The first two words of a statement, as Spark's lexer reads them (keywords in capitals). */
    static String words(String statement) {
        SqlBaseLexer lexer = new SqlBaseLexer(new UpperCaseCharStream(CharStreams.fromString(statement)));
        lexer.removeErrorListeners();
        List<String> words = new ArrayList<>();
        for (Token t : lexer.getAllTokens()) {
            if (t.getChannel() != Token.DEFAULT_CHANNEL) {
                continue;
            }
            String text = t.getText();
            words.add(t.getType() == SqlBaseLexer.IDENTIFIER || t.getType() == SqlBaseLexer.BACKQUOTED_IDENTIFIER
                ? text
                : text.toUpperCase(Locale.ROOT));
            if (words.size() == 2) {
                break;
            }
        }
        return words.isEmpty() ? "this statement" : String.join(" ", words);
    }

    private static boolean isName(Token t) {
        return t.getType() == SqlBaseLexer.BACKQUOTED_IDENTIFIER || t.getText().matches("[A-Za-z_][A-Za-z0-9_]*");
    }

    private static String unquote(String name) {
        if (name.length() >= 2 && name.startsWith("`") && name.endsWith("`")) {
            return name.substring(1, name.length() - 1).replace("``", "`");
        }
        return name;
    }

    /** Code points {@code [from, to)} of {@code sql} onto {@code piece}: the lexer counts code points, not chars. */
    private static void slice(Piece piece, String sql, int[] at, int from, int to) {
        if (to > from) {
            piece.copy(sql, at[from], at[to]);
        }
    }

    /** Where each code point of {@code sql} starts (in chars), and its length last. */
    private static int[] charOffsets(String sql) {
        int[] at = new int[sql.codePointCount(0, sql.length()) + 1];
        int chars = 0;
        for (int i = 0; i < at.length - 1; i++) {
            at[i] = chars;
            chars += Character.charCount(sql.codePointAt(chars));
        }
        at[at.length - 1] = sql.length();
        return at;
    }

    static RuntimeException refused(String why) {
        return Extensions.<RuntimeException>sneaky(new Extensions.Refused(why));
    }
}
