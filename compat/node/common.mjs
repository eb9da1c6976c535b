// What both client scripts share: the command line, JSON in and out, failing loudly.
//
// Usage: node CLIENT.mjs COMMAND --bootstrap H:P[,H:P...] [--topic T] [--group G] [--count N]
//        [--partitions N] [--replication-factor N] [--rate N] [--timeout-ms MS]
// Records to produce and timestamps to look up come as JSON on stdin. Each command prints
// one JSON document on stdout (produce-stream: one JSON line per event), and exits 1 with
// `error: ...` on stderr when anything fails.
import { parseArgs } from 'node:util'

const OPTIONS = {
  bootstrap: { type: 'string' },
  topic: { type: 'string' },
  group: { type: 'string' },
  count: { type: 'string' },
  partitions: { type: 'string' },
  'replication-factor': { type: 'string' },
  rate: { type: 'string' },
  'timeout-ms': { type: 'string', default: '60000' }
}

export function emit (value) {
  process.stdout.write(JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? Number(v) : v)) + '\n')
}

export async function readStdinJson () {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

function integer (options, name) {
  const text = options[name]
  if (text === undefined) throw new Error(`--${name} is required`)
  const value = Number(text)
  if (!Number.isInteger(value)) throw new Error(`--${name} ${text}: not an integer`)
  return value
}

export function needed (options, name) {
  if (options[name] === undefined) throw new Error(`--${name} is required`)
  return options[name]
}

// Runs `commands[COMMAND]` with the parsed options; a command that does not finish within
// --timeout-ms fails, so a client that hangs is reported instead of waited for.
// An error's message with those of the errors it wraps (both clients nest them).
export function describe (error) {
  const inner = [...(error?.errors ?? []), ...(error?.cause ? [error.cause] : [])]
  const message = String(error?.message ?? error)
  return inner.length ? `${message} (${inner.map(describe).join('; ')})` : message
}

export async function main (client, commands) {
  let timer
  try {
    const { positionals, values } = parseArgs({ options: OPTIONS, allowPositionals: true })
    const command = commands[positionals[0]]
    if (positionals.length !== 1 || command === undefined) {
      throw new Error(`usage: ${client} COMMAND --bootstrap H:P ...; commands: ${Object.keys(commands).join(', ')}`)
    }
    const options = {
      ...values,
      brokers: needed(values, 'bootstrap').split(','),
      int: name => integer(values, name)
    }
    const limit = options.int('timeout-ms')
    const expired = new Promise((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`${positionals[0]}: not done within ${limit} ms`)), limit)
    })
    await Promise.race([command(options), expired])
  } catch (error) {
    process.stderr.write(`error: ${client}: ${describe(error)}\n${error?.stack ?? ''}\n`)
    process.exitCode = 1
  } finally {
    clearTimeout(timer)
  }
  // A client may keep sockets or timers open after close: the result is out, so stop.
  process.exit()
}

export const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// Produces stdin's records ([{partition, key, value, headers, timestamp?}]) one send per
// partition, through `sendPartition(partition, records)`, which returns the base offset the
// client was acknowledged; prints each record's offset (base + its place), in input order.
export async function produceRecords (sendPartition) {
  const records = await readStdinJson()
  const groups = new Map()
  records.forEach((record, index) => {
    if (!groups.has(record.partition)) groups.set(record.partition, [])
    groups.get(record.partition).push(index)
  })
  const offsets = new Array(records.length)
  for (const [partition, indexes] of groups) {
    const base = await sendPartition(partition, indexes.map(i => records[i]))
    indexes.forEach((index, place) => { offsets[index] = Number(base) + place })
  }
  emit({ offsets })
}

// Looks up each timestamp of stdin ([timestamp, ...]) through `lookup(timestamp)`, which
// returns [[partition, offset]]; prints [{timestamp, offsets: {partition: offset}}].
export async function offsetsByTime (lookup) {
  const answers = []
  for (const timestamp of await readStdinJson()) {
    answers.push({ timestamp, offsets: Object.fromEntries(await lookup(timestamp)) })
  }
  emit({ answers })
}

// --count records `s0`, `s1`... to partition --partitions, one at a time, --rate a second,
// through `sendOne(value, partition)`, which returns the acknowledged [partition, offset].
// Prints one JSON line per acknowledgement or failure (a failed send is reported and the
// stream goes on), then a summary.
export async function produceStream (options, sendOne) {
  const partition = options.int('partitions')
  const count = options.int('count')
  const rate = options.int('rate')
  let acked = 0
  const started = Date.now()
  for (let sent = 0; sent < count; sent++) {
    await sleep(Math.max(0, started + (sent * 1000) / rate - Date.now()))
    const value = `s${sent}`
    try {
      const [where, offset] = await sendOne(value, partition)
      emit({ acked: value, partition: where, offset: Number(offset) })
      acked++
    } catch (error) {
      emit({ failed: value, error: describe(error) })
    }
  }
  emit({ done: true, acked, failed: count - acked })
}

// Each partition's next offset after the records read: what a consumer commits.
export function nextOffsets (records) {
  const next = new Map()
  for (const { partition, offset } of records) {
    next.set(partition, Math.max(next.get(partition) ?? 0, offset + 1))
  }
  return next
}
