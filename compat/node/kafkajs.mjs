// kafkajs (pure JavaScript, its own protocol code) driven by tests/test_compat_node.py.
// See common.mjs for the command line; every command prints what the client answered.
import kafkajs from 'kafkajs'
import { emit, main, needed, nextOffsets, offsetsByTime, produceRecords, produceStream } from './common.mjs'

const { Kafka, Partitioners, logLevel } = kafkajs
const LEVELS = Object.fromEntries(Object.entries(logLevel).map(([name, level]) => [level, name]))

// kafkajs logs to stdout by default: its lines go to stderr, so stdout stays JSON.
const toStderr = () => ({ level, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`kafkajs ${LEVELS[level]}: ${message} ${JSON.stringify(extra)}\n`)
}

function client (options) {
  return new Kafka({
    clientId: 'tidelog-compat-kafkajs',
    brokers: options.brokers,
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    connectionTimeout: 3000,
    requestTimeout: 30000,
    retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 10 }
  })
}

async function withAdmin (options, use) {
  const admin = client(options).admin()
  await admin.connect()
  try {
    return await use(admin)
  } finally {
    await admin.disconnect()
  }
}

async function withProducer (options, settings, use) {
  const producer = client(options).producer({
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
    ...settings
  })
  await producer.connect()
  try {
    return await use(producer)
  } finally {
    await producer.disconnect()
  }
}

function message (record) {
  return {
    key: record.key,
    value: record.value,
    headers: record.headers ?? {},
    partition: record.partition,
    ...(record.timestamp !== undefined && { timestamp: String(record.timestamp) })
  }
}

function decoded (partition, received) {
  const headers = {}
  for (const [key, value] of Object.entries(received.headers ?? {})) headers[key] = value?.toString()
  return {
    partition,
    offset: Number(received.offset),
    key: received.key?.toString() ?? null,
    value: received.value?.toString() ?? null,
    headers,
    timestamp: Number(received.timestamp)
  }
}

// Reads `--count` records of `--topic` through a group (kafkajs has no consumer without
// one), from the beginning; with `commit`, commits each partition's next offset at the end.
async function consumeThroughGroup (options, commit) {
  const topic = needed(options, 'topic')
  const count = options.int('count')
  const consumer = client(options).consumer({
    groupId: needed(options, 'group'),
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 500
  })
  const records = []
  let resolveDone
  const done = new Promise(resolve => { resolveDone = resolve })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message: received }) => {
        records.push(decoded(partition, received))
        if (records.length >= count) resolveDone()
      }
    })
    await done
    if (commit) {
      await consumer.commitOffsets(
        [...nextOffsets(records)].map(([partition, offset]) => ({ topic, partition, offset: String(offset) }))
      )
    }
  } finally {
    await consumer.disconnect()
  }
  emit({ records })
}

const commands = {
  'create-topic': options =>
    withAdmin(options, async admin => {
      const created = await admin.createTopics({
        topics: [{
          topic: needed(options, 'topic'),
          numPartitions: options.int('partitions'),
          replicationFactor: options.int('replication-factor')
        }],
        waitForLeaders: true
      })
      emit({ created })
    }),

  'list-topics': options => withAdmin(options, async admin => emit({ topics: await admin.listTopics() })),

  'describe-topic': options =>
    withAdmin(options, async admin => {
      const { topics } = await admin.fetchTopicMetadata({ topics: [needed(options, 'topic')] })
      const partitions = topics[0].partitions
        .map(p => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr }))
        .sort((a, b) => a.partition - b.partition)
      emit({ name: topics[0].name, partitions })
    }),

  'add-partitions': options =>
    withAdmin(options, async admin => {
      await admin.createPartitions({
        topicPartitions: [{ topic: needed(options, 'topic'), count: options.int('partitions') }]
      })
      emit({ partitions: options.int('partitions') })
    }),

  'delete-topic': options =>
    withAdmin(options, async admin => {
      await admin.deleteTopics({ topics: [needed(options, 'topic')] })
      emit({ deleted: options.topic })
    }),

  produce: options =>
    withProducer(options, {}, producer =>
      produceRecords(async (partition, records) => {
        const [answer] = await producer.send({
          topic: needed(options, 'topic'),
          acks: -1,
          messages: records.map(message)
        })
        if (answer.partition !== partition) throw new Error(`answer for partition ${answer.partition}`)
        return answer.baseOffset
      })
    ),

  consume: options => consumeThroughGroup(options, false),
  'group-consume': options => consumeThroughGroup(options, true),

  'offsets-by-time': options =>
    withAdmin(options, admin =>
      offsetsByTime(async timestamp => {
        const found = await admin.fetchTopicOffsetsByTimestamp(needed(options, 'topic'), timestamp)
        return found.map(p => [p.partition, Number(p.offset)])
      })
    ),

  // Idempotent (kafkajs then allows one request in flight).
  'produce-stream': options =>
    withProducer(options, { idempotent: true, maxInFlightRequests: 1 }, producer =>
      produceStream(options, async (value, partition) => {
        const topic = needed(options, 'topic')
        const [answer] = await producer.send({ topic, acks: -1, messages: [{ value, partition }] })
        return [answer.partition, answer.baseOffset]
      })
    )
}

await main('kafkajs', commands)
