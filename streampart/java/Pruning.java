package streampart.sqlserver;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.FileStatusWithMetadata;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A snapshot's files pruned by their Delta statistics before Spark opens them.
 *
 * <p>A snapshot is read from a fixed list of Parquet files ({@code streampart/query.py}). Spark
 * asks the relation's file index for the files to scan with the statement's filters on the data
 * columns (the ones it pushes down to the scan); this index answers with only the files whose
 * statistics (each column's minimum, maximum and null count, from the file's add action) can hold
 * a row that passes them. A filter it does not know (a function of a column, a cast, a LIKE) keeps
 * every file: the rows are still filtered by Spark, so pruning never changes an answer, only what
 * is read.
 */
public final class Pruning {
    private Pruning() {}

    /**
     * {@code frame} (a Parquet read of a file list: one {@link LogicalRelation}) with its file index
     * wrapped in one that prunes by {@code bounds}: a JSON object {@code {"names": [file name, …],
     * "rows": [rows, …], "columns": {name: {"min": […], "max": […], "nulls": […]}}}} in the files'
     * order, each bound as Spark holds the column's values (timestamps in microseconds, dates in
     * days); a file or bound missing there is never pruned. Any other plan is returned as it is.
     */
    public static org.apache.spark.sql.classic.Dataset<?> prune(
            org.apache.spark.sql.classic.Dataset<?> frame, String bounds) throws Exception {
        LogicalPlan plan = frame.logicalPlan();
        if (!(plan instanceof LogicalRelation lr) || !(lr.relation() instanceof HadoopFsRelation r)) {
            return frame;
        }
        Index index = new Index(r.location(), parse(bounds));
        HadoopFsRelation pruned = HadoopFsRelation.apply(
            index, r.partitionSchema(), r.dataSchema(), r.bucketSpec(), r.fileFormat(), r.options(),
            r.sparkSession());
        LogicalRelation relation = new LogicalRelation(
            pruned, lr.output(), lr.catalogTable(), lr.isStreaming(), lr.stream());
        return org.apache.spark.sql.classic.Dataset.ofRows(frame.sparkSession(), relation);
    }

    /** One file's statistics: its rows, and each column's bounds (lower-case names). */
    record Stats(long rows, Map<String, Bound> columns) {}

    /** A column's minimum and maximum (null: none recorded) and null count (-1: not recorded). */
    record Bound(Object min, Object max, long nulls) {}

    static Map<String, Stats> parse(String json) throws Exception {
        JsonNode root = new ObjectMapper().readTree(json);
        JsonNode names = root.get("names");
        JsonNode rows = root.get("rows");
        List<Map<String, Bound>> columns = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            columns.add(new HashMap<>());
        }
        var fields = root.get("columns").fields();
        while (fields.hasNext()) {
            var column = fields.next();
            String name = column.getKey().toLowerCase(Locale.ROOT);
            JsonNode min = column.getValue().get("min");
            JsonNode max = column.getValue().get("max");
            JsonNode nulls = column.getValue().get("nulls");
            for (int i = 0; i < names.size(); i++) {
                JsonNode n = nulls.get(i);
                columns.get(i).put(name, new Bound(value(min.get(i)), value(max.get(i)),
                    n == null || n.isNull() ? -1 : n.asLong()));
            }
        }
        Map<String, Stats> out = new HashMap<>();
        for (int i = 0; i < names.size(); i++) {
            JsonNode r = rows.get(i);
            out.put(names.get(i).asText(), new Stats(r == null || r.isNull() ? -1 : r.asLong(), columns.get(i)));
        }
        return out;
    }

    private static Object value(JsonNode node) {
        if (node == null || node.isNull()) {
            return null;
        }
        if (node.isIntegralNumber()) {
            return node.asLong();
        }
        if (node.isNumber()) {
            return node.asDouble();
        }
        return node.asText();
    }

    /** The wrapped index: the same files, less those the filters rule out. */
    static final class Index implements FileIndex {
        private final FileIndex inner;
        private final Map<String, Stats> stats;

        Index(FileIndex inner, Map<String, Stats> stats) {
            this.inner = inner;
            this.stats = stats;
        }

        @Override
        public Seq<Path> rootPaths() {
            return inner.rootPaths();
        }

        @Override
        public Seq<PartitionDirectory> listFiles(Seq<Expression> partitionFilters, Seq<Expression> dataFilters) {
            Seq<PartitionDirectory> listed = inner.listFiles(partitionFilters, dataFilters);
            List<Expression> filters = CollectionConverters.asJava(dataFilters);
            if (filters.isEmpty()) {
                return listed;
            }
            List<PartitionDirectory> out = new ArrayList<>();
            for (PartitionDirectory dir : CollectionConverters.asJava(listed)) {
                List<FileStatusWithMetadata> kept = new ArrayList<>();
                for (FileStatusWithMetadata file : CollectionConverters.asJava(dir.files())) {
                    Stats s = stats.get(file.getPath().getName());
                    if (s == null || filters.stream().allMatch(f -> mayMatch(f, s))) {
                        kept.add(file);
                    }
                }
                out.add(new PartitionDirectory(dir.values(), CollectionConverters.asScala(kept).toList()));
            }
            return CollectionConverters.asScala(out).toList();
        }

        @Override
        public String[] inputFiles() {
            return inner.inputFiles();
        }

        @Override
        public void refresh() {
            inner.refresh();
        }

        @Override
        public long sizeInBytes() {
            return inner.sizeInBytes();
        }

        @Override
        public StructType partitionSchema() {
            return inner.partitionSchema();
        }
    }

    /** Whether a file of statistics {@code s} may hold a row for which {@code e} is true. */
    static boolean mayMatch(Expression e, Stats s) {
        if (e instanceof And and) {
            return mayMatch(and.left(), s) && mayMatch(and.right(), s);
        }
        if (e instanceof Or or) {
            return mayMatch(or.left(), s) || mayMatch(or.right(), s);
        }
        if (e instanceof IsNull isNull && isNull.child() instanceof Attribute a) {
            Bound b = s.columns().get(a.name().toLowerCase(Locale.ROOT));
            return b == null || b.nulls() != 0;
        }
        if (e instanceof IsNotNull notNull && notNull.child() instanceof Attribute a) {
            Bound b = s.columns().get(a.name().toLowerCase(Locale.ROOT));
            return b == null || b.nulls() < 0 || s.rows() < 0 || b.nulls() < s.rows();
        }
        if (e instanceof In in && in.value() instanceof Attribute a) {
            for (Expression option : CollectionConverters.asJava(in.list())) {
                if (!(option instanceof Literal lit) || within(a, lit.value(), s)) {
                    return true;
                }
            }
            return false;
        }
        if (e instanceof InSet set && set.child() instanceof Attribute a) {
            for (Object v : CollectionConverters.asJava(set.hset())) {
                if (within(a, v, s)) {
                    return true;
                }
            }
            return false;
        }
        if (e instanceof BinaryComparison cmp) {
            if (cmp.left() instanceof Attribute a && cmp.right() instanceof Literal lit) {
                return compare(cmp, a, lit.value(), s, false);
            }
            if (cmp.right() instanceof Attribute a && cmp.left() instanceof Literal lit) {
                return compare(cmp, a, lit.value(), s, true);
            }
        }
        return true;
    }

    /** {@code a <op> v} (or {@code v <op> a}, {@code flipped}) may hold in the file. */
    private static boolean compare(BinaryComparison cmp, Attribute a, Object v, Stats s, boolean flipped) {
        int[] span = span(a, v, s);
        if (span == null) {
            return true;  // nothing known: it may
        }
        if (span == NO_ROW) {
            return false;  // every value null: no comparison holds
        }
        int low = span[0];
        int high = span[1];
        if (cmp instanceof EqualTo || cmp instanceof EqualNullSafe) {
            return low <= 0 && high >= 0;
        }
        boolean less = cmp instanceof LessThan;
        boolean lessOrEqual = cmp instanceof LessThanOrEqual;
        boolean greater = cmp instanceof GreaterThan;
        boolean greaterOrEqual = cmp instanceof GreaterThanOrEqual;
        if (flipped) {  // v < a is a > v
            boolean l = less, le = lessOrEqual;
            less = greater;
            lessOrEqual = greaterOrEqual;
            greater = l;
            greaterOrEqual = le;
        }
        if (less) {
            return low < 0;
        }
        if (lessOrEqual) {
            return low <= 0;
        }
        if (greater) {
            return high > 0;
        }
        if (greaterOrEqual) {
            return high >= 0;
        }
        return true;
    }

    /** {@code a = v} may hold in the file. */
    private static boolean within(Attribute a, Object v, Stats s) {
        int[] span = span(a, v, s);
        return span == null || (span != NO_ROW && span[0] <= 0 && span[1] >= 0);
    }

    /** The span's answer when every value of the column is null: no comparison holds. */
    private static final int[] NO_ROW = new int[0];

    /**
     * How the column's minimum and maximum order against {@code v}: {@code {min vs v, max vs v}};
     * {@link #NO_ROW} if every value is null; null if nothing is known (no bound, no literal, or
     * values this cannot compare): the file may hold anything.
     */
    private static int[] span(Attribute a, Object v, Stats s) {
        Bound b = s.columns().get(a.name().toLowerCase(Locale.ROOT));
        if (b == null || v == null) {
            return null;
        }
        if (b.min() == null || b.max() == null) {
            return allNull(b, s) ? NO_ROW : null;
        }
        Integer low = order(b.min(), v);
        Integer high = order(b.max(), v);
        return low == null || high == null ? null : new int[] {low, high};
    }

    private static boolean allNull(Bound b, Stats s) {
        return b.nulls() >= 0 && s.rows() >= 0 && b.nulls() == s.rows();
    }

    /** How a recorded bound orders against a literal's value as Spark holds it; null: not comparable. */
    private static Integer order(Object bound, Object v) {
        if (bound instanceof Long l && (v instanceof Long || v instanceof Integer || v instanceof Short
                || v instanceof Byte)) {
            return Long.compare(l, ((Number) v).longValue());
        }
        if (bound instanceof Number n && v instanceof Number m) {
            double x = n.doubleValue();
            double y = m.doubleValue();
            if (Double.isNaN(x) || Double.isNaN(y)) {
                return null;
            }
            return x < y ? -1 : x > y ? 1 : 0;  // -0.0 equals 0.0, as in SQL
        }
        if (bound instanceof String text && v instanceof UTF8String u) {
            return UTF8String.fromString(text).compareTo(u);
        }
        return null;
    }
}
