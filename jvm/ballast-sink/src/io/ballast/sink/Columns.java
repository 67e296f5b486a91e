package io.ballast.sink;

import java.io.Serializable;
import java.util.Arrays;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/** Where the writer finds each column it reads in a row (-1: absent), checked once per write. */
final class Columns implements Serializable {
  final int topic, key, value, partition, offset, reason, detail, source;

  private Columns(StructType s) {
    topic = optional(s, "topic", DataTypes.StringType);
    key = optional(s, "key", DataTypes.BinaryType);
    value = required(s, "value", DataTypes.BinaryType);
    partition = required(s, "__p", DataTypes.IntegerType);
    offset = required(s, "__o", DataTypes.LongType);
    reason = optional(s, "__reason", DataTypes.StringType);
    detail = optional(s, "__detail", DataTypes.StringType);
    source = optional(s, "__source", DataTypes.StringType);
  }

  /**
   * The columns of `schema`, refused when a record could have nowhere to go: no topic column and no
   * `topic` option, or dead letters (a `__reason` column) with neither a topic column nor the
   * `dead-letter-topic` option (they would land among the outputs).
   */
  static Columns of(StructType schema, boolean topicOption, boolean deadLetterTopicOption) {
    Columns c = new Columns(schema);
    if (c.topic < 0 && !topicOption) {
      throw new IllegalArgumentException("no topic: give the rows a `topic` column or the write a `topic` option");
    }
    if (c.topic < 0 && c.reason >= 0 && !deadLetterTopicOption) {
      throw new IllegalArgumentException("no topic for dead letters: the rows have a __reason column but no `topic` "
          + "column; give the write a `" + RecordWriter.DEAD_LETTER_TOPIC + "` option");
    }
    return c;
  }

  /** Column `name`'s index in `s` (-1: absent), refused if it is not of `type` (null: any type). */
  static int optional(StructType s, String name, DataType type) {
    if (!Arrays.asList(s.fieldNames()).contains(name)) {
      return -1;
    }
    int i = s.fieldIndex(name);
    if (type != null && !s.fields()[i].dataType().equals(type)) {
      throw new IllegalArgumentException("column " + name + " is " + s.fields()[i].dataType().simpleString()
          + ", Ballast's Kafka writer needs " + type.simpleString());
    }
    return i;
  }

  static int required(StructType s, String name, DataType type) {
    int i = optional(s, name, type);
    if (i < 0) {
      throw new IllegalArgumentException("Ballast's Kafka writer needs a column " + name + " ("
          + (type == null ? "any type" : type.simpleString())
          + "); the rows have " + String.join(", ", s.fieldNames()));
    }
    return i;
  }
}
