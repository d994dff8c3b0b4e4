import { describe, expect, it } from 'vitest';
import { extractBoxed, extractChoice, extractMathAnswer, mathAnswersMatch, parseNumber, choiceLetters } from '../../../../src/handlers/tasks/answer-check.js';

describe('extractBoxed', () => {
  it('returns the content of the last boxed expression with nested braces kept', () => {
    expect(extractBoxed('first \\boxed{1} then \\boxed{\\frac{1}{2}}')).toBe('\\frac{1}{2}');
  });
  it('returns null when there is no boxed expression', () => {
    expect(extractBoxed('the answer is 4')).toBeNull();
  });
  it('reads a brace-less boxed value up to the next space', () => {
    expect(extractBoxed('so \\boxed 42 done')).toBe('42');
  });
  it('ignores an unbalanced boxed expression', () => {
    expect(extractBoxed('\\boxed{12')).toBeNull();
  });
});

describe('extractMathAnswer', () => {
  it('prefers the boxed answer over an "answer is" phrase', () => {
    expect(extractMathAnswer('The answer is 3, i.e. \\boxed{4}')).toBe('4');
  });
  it('reads the value after "The answer is" without the final period', () => {
    expect(extractMathAnswer('After work, the answer is 17.')).toBe('17');
  });
  it('takes a short bare response as the answer', () => {
    expect(extractMathAnswer(' 3/4 ')).toBe('3/4');
  });
  it('returns null for a long text without an answer marker', () => {
    expect(extractMathAnswer('I computed many things and I am not sure what the result is, sorry.')).toBeNull();
  });
});

describe('parseNumber', () => {
  it.each([
    ['42', 42],
    ['-7', -7],
    ['1,000', 1000],
    ['3.25', 3.25],
    ['.5', 0.5],
    ['1e-3', 0.001],
    ['3/4', 0.75],
    ['\\frac{3}{4}', 0.75],
    ['\\dfrac{-1}{2}', -0.5],
    ['-\\frac{1}{2}', -0.5],
    ['\\frac12', 0.5],
    ['$12$', 12],
    ['50\\%', 50],
    ['2\\sqrt{2}', 2 * Math.SQRT2],
    ['x = 5', 5],
    ['90^\\circ', 90],
  ])('parses %s', (text, value) => {
    expect(parseNumber(text)).toBeCloseTo(value, 12);
  });
  it('returns null for an expression it cannot evaluate', () => {
    expect(parseNumber('x^2+1')).toBeNull();
  });
  it('returns null for a division by zero', () => {
    expect(parseNumber('1/0')).toBeNull();
  });
});

describe('mathAnswersMatch', () => {
  it('matches a fraction against its decimal form', () => {
    expect(mathAnswersMatch('\\frac{1}{4}', '0.25')).toBe(true);
  });
  it('matches a value rounded to the ground truth precision', () => {
    expect(mathAnswersMatch('1/3', '0.333')).toBe(true);
  });
  it('rejects a value that differs at the ground truth precision', () => {
    expect(mathAnswersMatch('0.34', '0.333')).toBe(false);
  });
  it('rejects a different integer', () => {
    expect(mathAnswersMatch('41', '42')).toBe(false);
  });
  it('matches equal symbolic answers after normalization', () => {
    expect(mathAnswersMatch('$x^2 + 1$', 'x^2+1')).toBe(true);
  });
  it('matches tuples element by element', () => {
    expect(mathAnswersMatch('(0.5, 2)', '\\left(\\frac{1}{2}, 2\\right)')).toBe(true);
  });
  it('rejects tuples of different length', () => {
    expect(mathAnswersMatch('(1, 2)', '(1, 2, 3)')).toBe(false);
  });
  it('rejects an empty answer', () => {
    expect(mathAnswersMatch('', '')).toBe(false);
  });
});

describe('extractChoice', () => {
  const letters = choiceLetters(4);
  it('reads a boxed letter', () => {
    expect(extractChoice('Thus \\boxed{C}.', letters)).toBe('C');
  });
  it('reads the last "answer is" letter in parentheses', () => {
    expect(extractChoice('Maybe A... no. The answer is (D).', letters)).toBe('D');
  });
  it('reads a response that is only a letter', () => {
    expect(extractChoice('b.', letters)).toBe('B');
  });
  it('ignores a letter outside the choices', () => {
    expect(extractChoice('Answer: F', letters)).toBeNull();
  });
  it('maps a response equal to a choice text onto its letter', () => {
    expect(extractChoice('Mitochondria', letters, ['Nucleus', 'Mitochondria', 'Ribosome', 'Golgi'])).toBe('B');
  });
  it('does not take the article "a" in a sentence as choice A', () => {
    expect(extractChoice('This is a hard question about a cell and I do not know which one it is at all', letters)).toBeNull();
  });
});
